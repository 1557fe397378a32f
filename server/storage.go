package server

// The storage block: where chunk data lives (memory, hybrid, disk). Kept in
// this file, apart from the other config blocks.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/diskstore"
	"go.yaml.in/yaml/v3"
)

// StorageMode says where the server keeps chunk data.
type StorageMode string

// Storage modes. See docs/storage.md.
const (
	// StorageMemory keeps every chunk in memory, as received. The default.
	StorageMemory StorageMode = "memory"
	// StorageHybrid keeps chunk data in memory up to MemoryLimitBytes and
	// the least recently used data past it on disk.
	StorageHybrid StorageMode = "hybrid"
	// StorageDisk writes all chunk data to disk at insert and keeps the
	// recently used data in a memory cache of MemoryLimitBytes.
	StorageDisk StorageMode = "disk"
)

// DefaultDiskCacheBytes is the memory cache of disk mode when
// MemoryLimitBytes is zero.
const DefaultDiskCacheBytes = 64 << 20

// SpillDirName is the directory under CheckpointDir that holds the spilled
// chunk data when StorageConfig.Dir is empty.
const SpillDirName = "spill"

// StorageConfig says where the chunk data of all tables lives: the chunk
// store is shared by every table, so the limit is per server. Item
// metadata, chunk metadata and the selectors always stay in memory.
type StorageConfig struct {
	// Mode is StorageMemory, StorageHybrid or StorageDisk. Empty means
	// StorageMemory.
	Mode StorageMode
	// MemoryLimitBytes bounds the encoded chunk data held in memory; the
	// process uses more (see docs/storage.md for the overhead). Hybrid mode
	// needs it > 0. In disk mode zero means DefaultDiskCacheBytes. Memory
	// mode has no limit and needs it zero.
	MemoryLimitBytes int64
	// Dir holds the chunk data on disk in hybrid and disk modes. It is a
	// spill area, not durable storage: it is wiped at every start, and
	// refused if it holds files but is not a spill directory. Empty means
	// SpillDirName under CheckpointDir, or a new temporary directory
	// (removed at Close) when there is no CheckpointDir. Memory mode needs
	// it empty.
	Dir string
}

func (c StorageConfig) mode() StorageMode {
	if c.Mode == "" {
		return StorageMemory
	}
	return c.Mode
}

// tiered reports whether chunk data can live on disk.
func (c StorageConfig) tiered() bool { return c.mode() != StorageMemory }

// memoryLimit is the chunk store's limit, with disk mode's default.
func (c StorageConfig) memoryLimit() int64 {
	if c.mode() == StorageDisk && c.MemoryLimitBytes == 0 {
		return DefaultDiskCacheBytes
	}
	return c.MemoryLimitBytes
}

// validate reports the first problem, as "field: reason".
func (c StorageConfig) validate() error {
	switch c.mode() {
	case StorageMemory:
		if c.MemoryLimitBytes != 0 {
			return errors.New("storage.memory_limit_bytes: only hybrid and disk modes have a memory limit; set storage.mode")
		}
		if c.Dir != "" {
			return errors.New("storage.dir: only hybrid and disk modes use a directory; set storage.mode")
		}
	case StorageHybrid:
		if c.MemoryLimitBytes <= 0 {
			return fmt.Errorf("storage.memory_limit_bytes: hybrid mode needs a limit > 0, got %d", c.MemoryLimitBytes)
		}
	case StorageDisk:
		if c.MemoryLimitBytes < 0 {
			return fmt.Errorf("storage.memory_limit_bytes: must be >= 0, got %d", c.MemoryLimitBytes)
		}
	default:
		return fmt.Errorf("storage.mode: want memory, hybrid or disk, got %q", c.Mode)
	}
	return nil
}

// GoMemoryLimit is the soft memory limit (see runtime/debug.SetMemoryLimit)
// that suits a process serving cfg: the chunk data limit plus a quarter of
// it for garbage between collections, pebble's bound and 64 MiB for the
// rest of the heap. It is 0 in memory mode, which has no bound. The
// reverie binary sets it unless GOMEMLIMIT is set; an embedding program
// decides for itself.
func GoMemoryLimit(cfg Config) int64 {
	if !cfg.Storage.tiered() {
		return 0
	}
	limit := cfg.Storage.memoryLimit()
	return limit + limit/4 + diskstore.Options{}.MemoryBound() + 64<<20
}

// SetGoMemoryLimit sets the process's soft memory limit to
// GoMemoryLimit(cfg) unless it is 0 or the GOMEMLIMIT environment variable
// is set, and returns the limit in force.
func SetGoMemoryLimit(cfg Config) int64 {
	if lim := GoMemoryLimit(cfg); lim > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(lim)
	}
	return debug.SetMemoryLimit(-1)
}

// storage is the server's chunk store and what it needs closed.
type storage struct {
	chunks  *chunkstore.Store
	spill   *diskstore.Store // nil in memory mode
	tempDir string           // removed at close, if set
}

// openStorage opens the chunk store that cfg asks for.
func openStorage(cfg Config, ckptRoot string, log *slog.Logger) (*storage, error) {
	sc := cfg.Storage
	if !sc.tiered() {
		return &storage{chunks: chunkstore.New()}, nil
	}
	st := &storage{}
	dir := sc.Dir
	switch {
	case dir != "":
	case ckptRoot != "":
		dir = filepath.Join(ckptRoot, SpillDirName)
	default:
		tmp, err := os.MkdirTemp("", "reverie-spill-")
		if err != nil {
			return nil, fmt.Errorf("%w: storage.dir: %v", ErrInvalidConfig, err)
		}
		dir, st.tempDir = tmp, tmp
	}
	spill, err := diskstore.Open(dir, diskstore.Options{Logger: log})
	if err != nil {
		st.close()
		return nil, fmt.Errorf("%w: storage.dir: %v", ErrInvalidConfig, err)
	}
	st.spill = spill
	mode := chunkstore.Hybrid
	if sc.mode() == StorageDisk {
		mode = chunkstore.Disk
	}
	st.chunks, err = chunkstore.NewTiered(chunkstore.Options{Mode: mode, MemoryLimit: sc.memoryLimit(), Spill: spill})
	if err != nil {
		st.close()
		return nil, fmt.Errorf("%w: storage: %v", ErrInvalidConfig, err)
	}
	log.Info("chunk data spills to disk", "mode", sc.mode(), "memory_limit_bytes", sc.memoryLimit(), "dir", dir)
	return st, nil
}

// close stops the chunk store, then closes and wipes the spill.
func (st *storage) close() error {
	var errs []error
	if st.chunks != nil {
		errs = append(errs, st.chunks.Close())
	}
	if st.spill != nil {
		errs = append(errs, st.spill.Close())
	}
	if st.tempDir != "" {
		errs = append(errs, os.RemoveAll(st.tempDir))
	}
	return errors.Join(errs...)
}

// StorageStats describes the chunk data of a hybrid or disk mode server.
type StorageStats = chunkstore.Stats

// StorageStats returns the figures of the chunk store's tiers; zero in
// memory mode.
func (s *Server) StorageStats() StorageStats { return s.storage.chunks.Stats() }

// yamlStorageKeys are the keys of the storage block.
var yamlStorageKeys = []string{"mode", "memory_limit_bytes", "dir"}

// yamlStorage parses the storage block.
func (p *cfgParser) yamlStorage(n *yaml.Node) (StorageConfig, error) {
	var sc StorageConfig
	m, _, err := p.ymapping(n, "storage", yamlStorageKeys...)
	if err != nil {
		return sc, err
	}
	if v, ok := m["mode"]; ok {
		mode, err := p.ystring(v, "storage.mode")
		if err != nil {
			return sc, err
		}
		switch StorageMode(mode) {
		case StorageMemory, StorageHybrid, StorageDisk:
		default:
			return sc, p.yerrf("storage.mode", v, "want memory, hybrid or disk, got %q", mode)
		}
		sc.Mode = StorageMode(mode)
	}
	if v, ok := m["memory_limit_bytes"]; ok {
		if sc.MemoryLimitBytes, err = p.yint(v, "storage.memory_limit_bytes"); err != nil {
			return sc, err
		}
	}
	if v, ok := m["dir"]; ok {
		if sc.Dir, err = p.ystring(v, "storage.dir"); err != nil {
			return sc, err
		}
	}
	if err := sc.validate(); err != nil {
		return sc, p.yerrf("", n, "%v", err)
	}
	return sc, nil
}
