// Package diskstore is the spill area of a tiered chunk store: chunk data
// that does not fit in memory, in a pebble database.
//
// It is not durable, and not meant to be: Open wipes the directory, pebble's
// write-ahead log is off (a write is in memory until pebble flushes its
// memtable), and nothing is synced. A crash loses the spill along with the
// process's memory, and durability comes from checkpoints. In exchange, a
// spill write costs a copy into a memtable, not a disk sync.
//
// # Layout
//
// The directory holds a marker file, REVERIE_SPILL, a LOCK file that an open
// store holds locked, and pebble's files under pebble/. Each value is one chunk's data (a reverb.ChunkData in its
// protobuf encoding) under an 8-byte big-endian key: the id the chunk store
// gave it, never reused within one run. Values are not compressed again:
// clients compress tensors already.
//
// # Memory
//
// Pebble's own memory is bounded by Options: at most MemTableStopWrites
// memtables of MemTableSize bytes (writes stall beyond that until a flush
// finishes) and a block cache of CacheSize bytes, plus its index and
// filter blocks and compaction buffers, which stay in the low MiB.
//
// A Store is safe for concurrent use.
package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/reverie-rl/reverie/internal/chunkstore"
)

// Errors of the store.
var (
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("diskstore: closed")
	// ErrNotSpillDir: Open was given a directory that holds files but no
	// marker; it refuses to wipe what it did not create.
	ErrNotSpillDir = errors.New("diskstore: directory is not empty and not a reverie spill directory")
	// ErrLocked: another open Store (in this process or another) uses the
	// directory.
	ErrLocked = errors.New("diskstore: directory in use by another server")
)

// MarkerFile names the file that marks a directory as a spill directory.
const MarkerFile = "REVERIE_SPILL"

// lockFile names the file a Store holds locked while it is open, so that a
// second server given the same directory fails instead of wiping it.
const lockFile = "LOCK"

// Defaults of Options.
const (
	DefaultMemTableSize       = 4 << 20
	DefaultMemTableStopWrites = 2
	DefaultCacheSize          = 8 << 20
)

// Options tune pebble's memory. Zero fields take the defaults above, for a
// total of about 16 MiB.
type Options struct {
	MemTableSize       int64
	MemTableStopWrites int
	CacheSize          int64
	// Logger receives pebble's messages (info as debug). Nil means
	// slog.Default().
	Logger *slog.Logger
}

// MemoryBound is the most memory pebble's memtables and block cache take
// under opts.
func (o Options) MemoryBound() int64 {
	o.fill()
	return o.MemTableSize*int64(o.MemTableStopWrites) + o.CacheSize
}

func (o *Options) fill() {
	if o.MemTableSize <= 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.MemTableStopWrites <= 0 {
		o.MemTableStopWrites = DefaultMemTableStopWrites
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Store is a spill area in one directory.
type Store struct {
	dir string
	// mu is held for reading by every pebble call and for writing by
	// Close, which turns later calls into ErrClosed (pebble panics on a
	// closed database).
	mu   sync.RWMutex
	db   *pebble.DB // nil once closed; guarded by mu
	lock io.Closer  // the lock on lockFile, released by Close
}

var _ chunkstore.Spill = (*Store)(nil)

// Open locks dir (creating it if needed), wipes it and opens an empty store
// in it. A directory that holds files but no MarkerFile is refused with
// ErrNotSpillDir, one that another Store has open with ErrLocked.
func Open(dir string, opts Options) (*Store, error) {
	opts.fill()
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	lock, err := vfs.Default.Lock(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrLocked, dir, err)
	}
	s, err := open(dir, opts)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func open(dir string, opts Options) (*Store, error) {
	if err := wipe(dir); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, MarkerFile), []byte("reverie spill area: wiped at every start; safe to delete while reverie is stopped\n"), 0o644); err != nil {
		return nil, fmt.Errorf("diskstore: %w", err)
	}
	po := &pebble.Options{
		DisableWAL:                  true,
		MemTableSize:                uint64(opts.MemTableSize),
		MemTableStopWritesThreshold: opts.MemTableStopWrites,
		CacheSize:                   opts.CacheSize,
		Logger:                      pebbleLogger{opts.Logger},
	}
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	db, err := pebble.Open(filepath.Join(dir, "pebble"), po)
	if err != nil {
		return nil, fmt.Errorf("diskstore: open %s: %w", dir, err)
	}
	return &Store{dir: dir, db: db}, nil
}

// checkDir creates dir, or checks that it is empty or a spill directory.
func checkDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("diskstore: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	// Only the lock file: a crash in Open after it took the lock and
	// before it wrote the marker.
	if len(ents) == 0 || len(ents) == 1 && ents[0].Name() == lockFile {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerFile)); err != nil {
		return fmt.Errorf("%w: %s", ErrNotSpillDir, dir)
	}
	return nil
}

// wipe removes what a Store makes in dir (pebble's directory), a spill
// directory whose lock the caller holds. Nothing else is touched: the lock
// file and the marker, which open writes again (a crash in the middle
// must not leave pebble's files without the marker, which the next Open
// would refuse to wipe), and any other file, which a Store did not make. A
// spill directory configured above a checkpoint or log directory would
// otherwise take them with it (the server's config refuses that too).
func wipe(dir string) error { return wipeExcept(dir, "") }

// ownedEntries are the entries of a spill directory that wipe removes.
var ownedEntries = []string{"pebble"}

// wipeExcept is wipe, which also keeps the entry named keep (for tests: a
// wipe that a crash cut short).
func wipeExcept(dir, keep string) error {
	for _, n := range ownedEntries {
		if n == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("diskstore: wiping %s: %w", dir, err)
		}
	}
	return nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func key(id uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], id)
	return k[:]
}

// Put implements chunkstore.Spill.
func (s *Store) Put(id uint64, b []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	if err := s.db.Set(key(id), b, pebble.NoSync); err != nil {
		return fmt.Errorf("diskstore: put %d: %w", id, err)
	}
	return nil
}

// Get implements chunkstore.Spill.
func (s *Store) Get(id uint64) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return nil, ErrClosed
	}
	v, closer, err := s.db.Get(key(id))
	if err != nil {
		return nil, fmt.Errorf("diskstore: get %d: %w", id, err)
	}
	b := make([]byte, len(v))
	copy(b, v)
	closer.Close()
	return b, nil
}

// Delete implements chunkstore.Spill, in one batch.
func (s *Store) Delete(ids []uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, id := range ids {
		if err := b.Delete(key(id), nil); err != nil {
			return fmt.Errorf("diskstore: delete: %w", err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("diskstore: delete: %w", err)
	}
	return nil
}

// Len counts the values stored, by a full scan; for tests.
func (s *Store) Len() (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0, ErrClosed
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n, it.Close()
}

// DiskBytes is the size of pebble's files.
func (s *Store) DiskBytes() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0
	}
	return s.db.Metrics().DiskSpaceUsage()
}

// Close closes the database and removes the directory's contents: the
// spill is worthless once its chunk store is gone. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	if err == nil {
		// The marker goes after the rest, the lock file last: a crash
		// at any point leaves a directory the next Open takes back.
		err = wipe(s.dir)
		if err == nil {
			err = os.Remove(filepath.Join(s.dir, MarkerFile))
		}
	}
	err = errors.Join(err, s.lock.Close(), os.Remove(filepath.Join(s.dir, lockFile)))
	return err
}

// pebbleLogger sends pebble's messages to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	l.log.Error(msg)
	panic(msg)
}
