package server

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/ratelimit"
	"github.com/reverie-rl/reverie/internal/table"
	"github.com/reverie-rl/reverie/internal/wal"
	"github.com/reverie-rl/reverie/selector"
)

// DefaultPort is the TCP port reverie listens on when nothing else is said.
const DefaultPort = 8000

// DefaultTableName is the name of the table DefaultConfig serves.
const DefaultTableName = "replay"

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("server: invalid config")

// Config configures a Server. The zero value is not useful; start from
// DefaultConfig or a loaded config file.
type Config struct {
	// Port is the TCP port the binary listens on (all interfaces, dual stack)
	// when Listen is empty. Zero picks a free port.
	Port int
	// Listen overrides Port: "host:port" for TCP, or "unix:///path/sock" for
	// a unix socket. Empty means ":Port".
	Listen string
	// LocalListen, if set, is a unix socket ("unix:///path/sock") that the
	// binary serves beside Listen, for clients on the same machine: its
	// calls skip TLS and tokens (Server.ServeLocal; docs/config.md).
	LocalListen string
	// Transport is the HTTP/2 implementation that serves gRPC: TransportGRPC
	// (gRPC-Go's, the default; "" means it) or TransportOwn (reverie's own,
	// package h2grpc; experimental). Both serve the same service to the same
	// clients; docs/transport-plan.md says why the second exists.
	Transport string
	// Tables served. At least one; names are unique and non-empty.
	Tables []TableConfig
	// Selectors maps names to factories for selectors with Kind
	// selector.KindCustom. Nil means none.
	Selectors map[string]selector.Factory
	// CheckpointDir is where the Checkpoint RPC writes. Empty means the RPC
	// answers FailedPrecondition. When RestorePath is empty, New restores
	// the newest complete checkpoint found here, if any.
	CheckpointDir string
	// RestorePath names a checkpoint to restore at start: a checkpoint
	// directory (the path the Checkpoint RPC returned) or its
	// checkpoint.rvck file. It overrides the automatic restore from
	// CheckpointDir. See docs/formats.md for what is restored and what the
	// config decides.
	RestorePath string
	// CheckpointWriteRate caps how fast a checkpoint writes chunk data, in
	// bytes per second, so that it disturbs serving less. Zero means
	// DefaultCheckpointWriteRate; < 0 means no cap.
	CheckpointWriteRate int64
	// WAL turns on durable mode: a write-ahead log of every change, from
	// which the server recovers after a crash. The zero value is off. See
	// docs/formats.md.
	WAL WALConfig
	// Logger receives the server's structured logs. Nil means slog.Default().
	Logger *slog.Logger

	// Remote snapshots (snapshots.go).

	// Snapshots copies checkpoints to object storage and restores from
	// there at start. The zero value keeps no remote snapshots.
	Snapshots SnapshotConfig

	// Storage says where chunk data lives; the zero value keeps it all in
	// memory. See storage.go.
	Storage StorageConfig

	// TLS serves over TLS; the zero value serves plaintext (security.go).
	TLS TLSConfig
	// Auth asks every call but health checks for a bearer token; the zero
	// value asks for none (security.go).
	Auth AuthConfig
}

// WALConfig configures the write-ahead log. Durable mode needs
// CheckpointDir: the server takes a checkpoint whenever the log grows by
// CheckpointAfterBytes and then cuts the log.
type WALConfig struct {
	// Fsync is the fsync policy, and turns the log on: "always" (an insert,
	// sample, update or reset is answered only once it is on disk),
	// "interval" (written at once, fsynced every Interval: a machine crash
	// loses at most Interval) or "never" (written at once, fsynced by the
	// operating system). Empty means no log.
	Fsync string
	// Interval is the fsync interval under "interval"; zero means 100ms.
	Interval time.Duration
	// Dir holds the log's segment files; empty means CheckpointDir/wal.
	Dir string
	// CheckpointAfterBytes takes a checkpoint once the log has grown this
	// much since the last one; zero means DefaultCheckpointAfterBytes, < 0
	// never (the log then grows until a Checkpoint call).
	CheckpointAfterBytes int64
}

// DefaultCheckpointWriteRate is Config.CheckpointWriteRate's default: 128
// MiB/s, a 2 GiB table in about 17 s. On 2 cores under a mixed load, an
// unpaced checkpoint (2.6 s quiet) raised the p99 of samples 1.7-2.3x; paced
// at 128 MiB/s, 1.03-1.35x (docs/formats.md, Figures).
const DefaultCheckpointWriteRate = 128 << 20

func (c *Config) checkpointRate() int64 {
	switch {
	case c.CheckpointWriteRate == 0:
		return DefaultCheckpointWriteRate
	case c.CheckpointWriteRate < 0:
		return 0
	}
	return c.CheckpointWriteRate
}

// DefaultCheckpointAfterBytes is WALConfig.CheckpointAfterBytes's default.
const DefaultCheckpointAfterBytes = 1 << 30

// Enabled reports whether durable mode is on.
func (w WALConfig) Enabled() bool { return w.Fsync != "" }

// RateLimiter configures a table's rate limiter; see MinSize,
// SampleToInsertRatio, Queue and Stack for the usual forms.
type RateLimiter = ratelimit.Config

// MinSize admits samples once the table holds n items; inserts never block.
func MinSize(n int64) RateLimiter { return ratelimit.MinSize(n) }

// SampleToInsertRatio keeps samples per insert near spi once the table
// holds minSize items, within errorBuffer samples either way.
func SampleToInsertRatio(spi float64, minSize int64, errorBuffer float64) RateLimiter {
	return ratelimit.SampleToInsertRatio(spi, minSize, errorBuffer)
}

// Queue is the limiter of a queue table of the given size.
func Queue(size int64) RateLimiter { return ratelimit.Queue(size) }

// Stack is the limiter of a stack table of the given size.
func Stack(size int64) RateLimiter { return ratelimit.Stack(size) }

// TableExtension runs inside a table's atomic operations, under the table's
// lock: OnInsert, OnSample, OnUpdate, OnDelete and OnReset. Hooks must be
// fast, must not block or call back into the server, and must not keep the
// *TableItem past the call. Embed NoopExtension to implement only some.
type TableExtension = table.Extension

// TableItem is the item a TableExtension hook sees.
type TableItem = table.Item

// RestoreExtension is a TableExtension that tells items restored from a
// checkpoint at start from new inserts: the table calls its OnRestore for
// each restored item instead of OnInsert.
type RestoreExtension = table.RestoreExtension

// NoopExtension implements TableExtension with hooks that do nothing.
type NoopExtension = table.NoopExtension

// TableConfig configures one table.
type TableConfig struct {
	// Name of the table; required and unique.
	Name string
	// Sampler picks the items samples return.
	Sampler selector.Spec
	// Remover picks the item evicted when an insert overfills the table.
	Remover selector.Spec
	// MaxSize is the most items the table holds; must be > 0.
	MaxSize int64
	// MaxTimesSampled deletes an item after this many samples. Zero or less
	// means unlimited.
	MaxTimesSampled int32
	// RateLimiter bounds the ratio of samples to inserts.
	RateLimiter RateLimiter
	// Signature, if not nil, describes the item columns; ServerInfo reports
	// it and clients validate against it.
	Signature *tensorflowpb.StructuredValue
	// Extensions run inside the table's operations, in order.
	Extensions []TableExtension
}

// QueueTable is a FIFO queue of at most size items, each sampled once, as
// Reverb's Table.queue.
func QueueTable(name string, size int64) TableConfig {
	return TableConfig{
		Name:            name,
		Sampler:         selector.Spec{Kind: selector.KindFIFO},
		Remover:         selector.Spec{Kind: selector.KindFIFO},
		MaxSize:         size,
		MaxTimesSampled: 1,
		RateLimiter:     Queue(size),
	}
}

// StackTable is a LIFO stack of at most size items, each sampled once, as
// Reverb's Table.stack.
func StackTable(name string, size int64) TableConfig {
	return TableConfig{
		Name:            name,
		Sampler:         selector.Spec{Kind: selector.KindLIFO},
		Remover:         selector.Spec{Kind: selector.KindLIFO},
		MaxSize:         size,
		MaxTimesSampled: 1,
		RateLimiter:     Stack(size),
	}
}

// DefaultConfig serves one table named "replay" on DefaultPort: Uniform
// sampler, FIFO remover, max_size 1,000,000, MinSize(1).
func DefaultConfig() Config {
	return Config{
		Port: DefaultPort,
		Tables: []TableConfig{{
			Name:        DefaultTableName,
			Sampler:     selector.Spec{Kind: selector.KindUniform},
			Remover:     selector.Spec{Kind: selector.KindFIFO},
			MaxSize:     1_000_000,
			RateLimiter: MinSize(1),
		}},
	}
}

// Validate reports the first problem with the config, naming the field.
func (c *Config) Validate() error {
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("%w: port: must be in [0, 65535], got %d", ErrInvalidConfig, c.Port)
	}
	if len(c.Tables) == 0 {
		return fmt.Errorf("%w: tables: at least one table is required", ErrInvalidConfig)
	}
	if reason := checkLocalListen(c.LocalListen); reason != "" {
		return fmt.Errorf("%w: local_listen: %s", ErrInvalidConfig, reason)
	}
	if c.LocalListen != "" && c.LocalListen == c.Listen {
		return fmt.Errorf("%w: local_listen: %q is listen too; give the local clients a socket of their own", ErrInvalidConfig, c.LocalListen)
	}
	if reason := checkTransport(c.Transport); reason != "" {
		return fmt.Errorf("%w: transport: %s", ErrInvalidConfig, reason)
	}
	if reason := checkTransport(os.Getenv(TransportEnv)); reason != "" && c.Transport == "" {
		return fmt.Errorf("%w: %s (environment): %s", ErrInvalidConfig, TransportEnv, reason)
	}
	if err := c.TLS.validate(); err != nil {
		return err
	}
	if err := c.Auth.validate(); err != nil {
		return err
	}
	seen := make(map[string]bool, len(c.Tables))
	for i := range c.Tables {
		t := &c.Tables[i]
		field := fmt.Sprintf("tables[%d]", i)
		if t.Name == "" {
			return fmt.Errorf("%w: %s.name: must not be empty", ErrInvalidConfig, field)
		}
		field = fmt.Sprintf("tables[%d] (%q)", i, t.Name)
		if seen[t.Name] {
			return fmt.Errorf("%w: %s.name: duplicate table name", ErrInvalidConfig, field)
		}
		seen[t.Name] = true
		if t.MaxSize <= 0 {
			return fmt.Errorf("%w: %s.max_size: must be > 0, got %d", ErrInvalidConfig, field, t.MaxSize)
		}
		if err := c.checkSpec(t.Sampler); err != nil {
			return fmt.Errorf("%w: %s.sampler: %v", ErrInvalidConfig, field, err)
		}
		if err := c.checkSpec(t.Remover); err != nil {
			return fmt.Errorf("%w: %s.remover: %v", ErrInvalidConfig, field, err)
		}
		if err := t.RateLimiter.Validate(); err != nil {
			return fmt.Errorf("%w: %s.rate_limiter: %v", ErrInvalidConfig, field, err)
		}
		// The config files check signatures as they parse them; a Go
		// program embedding the server builds them itself. ServerInfo
		// sends a signature as it is, and an empty one breaks Reverb's
		// clients for every table.
		if t.Signature != nil {
			if sf, reason := checkSignature(t.Signature); reason != "" {
				return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, cfgJoinPath(field+".signature", sf), reason)
			}
		}
	}
	if !c.WAL.Enabled() {
		// An operator who names a log directory wants a log: starting
		// without one would lose what they meant to keep.
		if c.WAL.Dir != "" || c.WAL.Interval != 0 || c.WAL.CheckpointAfterBytes != 0 {
			return fmt.Errorf("%w: wal: dir, interval or checkpoint_after_bytes is set but fsync is not; fsync (always, interval or never) turns the write-ahead log on", ErrInvalidConfig)
		}
	} else {
		if _, err := wal.ParseSync(c.WAL.Fsync); err != nil {
			return fmt.Errorf("%w: wal.fsync: want always, interval or never, got %q", ErrInvalidConfig, c.WAL.Fsync)
		}
		if c.WAL.Interval < 0 {
			return fmt.Errorf("%w: wal.interval: must be >= 0, got %v", ErrInvalidConfig, c.WAL.Interval)
		}
		if c.CheckpointDir == "" {
			return fmt.Errorf("%w: wal: durable mode needs checkpoint_dir, where the server checkpoints to cut the log", ErrInvalidConfig)
		}
	}
	if err := c.Snapshots.validate(c); err != nil {
		return err
	}
	if err := c.Storage.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := c.checkSpillDir(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return nil
}

// checkSpillDir refuses a spill directory that is, or holds, the checkpoint
// or log directory. The spill area is scratch, wiped at every start; only
// what the spill makes is removed, but a layout that mixes it with
// durable data is one mistake away from losing that data.
func (c *Config) checkSpillDir() error {
	if !c.Storage.tiered() || c.Storage.Dir == "" {
		return nil
	}
	spill := resolvedDir(c.Storage.Dir)
	walDir := c.WAL.Dir
	if walDir == "" && c.WAL.Enabled() && c.CheckpointDir != "" {
		walDir = filepath.Join(c.CheckpointDir, "wal") // the log's default
	}
	for _, d := range []struct{ field, dir string }{
		{"checkpoint_dir", c.CheckpointDir},
		{"wal.dir", walDir},
	} {
		if d.dir == "" {
			continue
		}
		if other := resolvedDir(d.dir); other == spill || strings.HasPrefix(other, spill+string(filepath.Separator)) {
			return fmt.Errorf("storage.dir: %q is or holds %s %q; the spill area is scratch, wiped at every start: give it a directory of its own", c.Storage.Dir, d.field, d.dir)
		}
	}
	return nil
}

// resolvedDir is dir made absolute and clean, with symbolic links resolved
// as far as the directory exists.
func resolvedDir(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return filepath.Clean(dir)
	}
	// Resolve the longest part that exists, and keep the rest as written.
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		if filepath.Dir(p) == p {
			return abs
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

func (c *Config) checkSpec(s selector.Spec) error {
	switch s.Kind {
	case selector.KindUnset:
		return errors.New("no selector kind set")
	case selector.KindPrioritized:
		if math.IsNaN(s.PriorityExponent) || math.IsInf(s.PriorityExponent, 0) || s.PriorityExponent < 0 {
			return fmt.Errorf("priority_exponent: must be finite and >= 0, got %v", s.PriorityExponent)
		}
	case selector.KindCustom:
		if c.Selectors[s.Name] == nil {
			return fmt.Errorf("no selector factory named %q in Config.Selectors", s.Name)
		}
	case selector.KindFIFO, selector.KindLIFO, selector.KindUniform, selector.KindMinHeap, selector.KindMaxHeap:
	default:
		return fmt.Errorf("unknown selector kind %v", s.Kind)
	}
	return nil
}
