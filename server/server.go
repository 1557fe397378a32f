// Package server is reverie's embeddable replay server: the Reverb-compatible
// gRPC service over a set of tables that share one chunk store.
//
// A Go learner can run reverie inside its own process:
//
//	srv, err := server.New(server.DefaultConfig())
//	lis, err := server.Listen(":8000")
//	go srv.Serve(lis)
//	defer srv.Shutdown(ctx)
//
// The server also registers gRPC server reflection and the standard health
// service. A Server is safe for concurrent use.
package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"sync"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/checkpoint"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/remote"
	"github.com/reverie-rl/reverie/internal/table"
	"github.com/reverie-rl/reverie/internal/wal"
	"github.com/reverie-rl/reverie/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// Server serves a set of tables over gRPC.
type Server struct {
	reverbpb.UnimplementedReverbServiceServer

	log     *slog.Logger
	cfg     Config
	chunks  *chunkstore.Store
	storage *storage // owns chunks; closed once, after the handlers end
	// storageClosed makes closing storage idempotent.
	storageClosed sync.Once
	tables        map[string]*serverTable // fixed after New
	names         []string                // sorted table names
	stateID       *reverbpb.Uint128
	grpc          rpcServer // gRPC-Go's server or reverie's own (transport.go)
	health        *health.Server

	closing   chan struct{} // closed when draining starts
	closeOnce sync.Once

	// restoreRemoved: the checkpoint restored at start had items the
	// config removed (a smaller max_size, max_times_sampled).
	restoreRemoved bool

	metrics serverMetrics // counters for Collector (metrics.go)
	sec     *security     // TLS and tokens (security.go)

	ckptRoot string    // CheckpointDir made absolute, or ""
	ckptLock io.Closer // the lock on ckptRoot, released with the storage
	wal      *wal.Log  // the write-ahead log in durable mode, or nil
	ckpt     checkpointer
	remote   *remote.Bucket // Config.Snapshots.URL, or nil
	// remoteClose closes remote after the last upload.
	remoteClose sync.Once
	// bg tracks the goroutines that write checkpoints; bgCtx ends them
	// when the server stops hard.
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc
	hooks    struct {
		// checkpoint, if set, is called at each stage of writing a
		// checkpoint (tests pause the writer with it).
		checkpoint func(stage, table string)
	}
}

type serverTable struct {
	*table.Table
	cfg   TableConfig
	stats *table.Stats
}

// TableStats is a snapshot of a table's running statistics.
type TableStats = table.StatsSnapshot

// HTTP/2 flow-control windows the server grants each client. The stream
// window bounds what a client may send on one stream before the server
// reads it, with one exception: when the server starts reading a message
// larger than the window allows, gRPC-Go raises that stream's window to
// the message's size, and it holds the whole message until its last byte
// arrives. So one insert stream may hold one request (up to 40 MiB from
// Reverb's writers, 4 MiB from reverie's) on top of its window. gRPC-Go
// returns connection window as data arrives, read or not: the connection
// window paces a client, it does not bound what the server holds.
const (
	StreamWindowBytes = 1 << 20
	ConnWindowBytes   = 4 << 20
)

// writeBufferBytes is how much gRPC's transport gathers before a write to
// a connection. It writes when the buffer is full or when it has nothing
// more to send, so a larger buffer means fewer write calls under load and
// no added wait when idle. gRPC takes the buffer from a pool for each
// burst of writing and gives it back after, so an idle connection holds
// none; one being written to holds up to 1 MiB, for as long as the burst
// lasts (including a write blocked on a client that reads slowly). Against gRPC's default of 32 KiB, 1 MiB cost the server about
// 10-20% less CPU per sample at 400 B, 40 kB and 400 kB in most A/B
// rounds (docs/benchmarks-notes.md, "Writes in 1 MiB bursts").
const writeBufferBytes = 1 << 20

// New builds a server from cfg. It validates cfg and fails without side
// effects if it is not valid. It then restores Config.RestorePath, or the
// newest checkpoint in Config.CheckpointDir, and fails (with an error
// wrapping ErrRestore) unless the checkpoint is restored whole.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Certificates and tokens are read first: a bad file fails New
	// before anything is opened.
	sec, secured, err := newSecurity(&cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		sec:     sec,
		log:     cfg.Logger,
		cfg:     cfg,
		tables:  make(map[string]*serverTable, len(cfg.Tables)),
		stateID: newStateID(),
		closing: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := s.newWAL(); err != nil {
		return nil, err
	}
	for _, tc := range cfg.Tables {
		t, err := s.newTable(tc)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		s.tables[tc.Name] = t
		s.names = append(s.names, tc.Name)
	}
	sort.Strings(s.names)
	if cfg.CheckpointDir != "" {
		abs, err := filepath.Abs(cfg.CheckpointDir)
		if err != nil {
			return nil, fmt.Errorf("%w: checkpoint_dir: %v", ErrInvalidConfig, err)
		}
		s.ckptRoot = abs
		lock, err := checkpoint.LockRoot(abs)
		if err != nil {
			return nil, fmt.Errorf("%w: checkpoint_dir: %w", ErrInvalidConfig, err)
		}
		s.ckptLock = lock
	}
	st, err := openStorage(cfg, s.ckptRoot, s.log)
	if err != nil {
		s.unlockCheckpointDir()
		return nil, err
	}
	s.storage, s.chunks = st, st.chunks
	if err := s.openSnapshots(); err != nil {
		st.close()
		s.unlockCheckpointDir()
		return nil, err
	}
	if s.wal != nil {
		// Before the restore: a second server on the same log would
		// replay it, then cut and write over the first one's.
		if err := s.wal.Lock(); err != nil {
			s.closeRemote()
			s.closeStorage()
			return nil, fmt.Errorf("%w: wal.dir: %w", ErrInvalidConfig, err)
		}
	}
	mark, err := s.restoreAtStart()
	if err != nil {
		s.closeWAL()
		s.closeRemote()
		s.closeStorage()
		return nil, err
	}
	if err := s.recoverWAL(mark); err != nil {
		s.closeWAL()
		s.closeRemote()
		s.closeStorage()
		return nil, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	if s.wal != nil && s.restoreRemoved {
		// The removals were not logged, and a remover that draws at
		// random would pick other items after a crash, while the log's
		// records go on from the first choice. Checkpoint them now,
		// before serving, so that recovery starts from this state.
		if err := s.checkpointAtStart(); err != nil {
			s.bgCancel()
			s.closeWAL()
			s.closeRemote()
			s.closeStorage()
			return nil, fmt.Errorf("%w: checkpoint of the items left after the restore: %w", ErrRestore, err)
		}
	}

	// Calls are counted first, so that those refused for want of a token
	// are counted too.
	secured.unary = append([]grpc.UnaryServerInterceptor{s.metrics.unary}, secured.unary...)
	secured.stream = append([]grpc.StreamServerInterceptor{s.metrics.stream}, secured.stream...)
	s.grpc = s.newRPCServer(secured)
	s.grpc.RegisterService(reverbServiceDesc(), s)
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(reverbpb.ReverbService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.grpc, healthService{Server: s.health, closing: s.closing})
	reflection.Register(s.grpc)
	return s, nil
}

func (s *Server) newTable(tc TableConfig) (*serverTable, error) {
	sampler, err := s.newSelector(tc.Sampler)
	if err != nil {
		return nil, fmt.Errorf("table %q: sampler: %w", tc.Name, err)
	}
	remover, err := s.newSelector(tc.Remover)
	if err != nil {
		return nil, fmt.Errorf("table %q: remover: %w", tc.Name, err)
	}
	stats := table.NewStats()
	exts := append([]table.Extension{stats}, tc.Extensions...)
	if s.wal != nil {
		exts = append(exts, s.wal.Extension(tc.Name))
	}
	t, err := table.New(table.Config{
		Name:            tc.Name,
		Sampler:         sampler,
		Remover:         remover,
		MaxSize:         tc.MaxSize,
		MaxTimesSampled: tc.MaxTimesSampled,
		RateLimiter:     tc.RateLimiter,
		Extensions:      exts,
	})
	if err != nil {
		return nil, err
	}
	return &serverTable{Table: t, cfg: tc, stats: stats}, nil
}

func (s *Server) newSelector(spec selector.Spec) (selector.Selector, error) {
	seed := randUint64()
	if spec.Kind == selector.KindCustom {
		f := s.cfg.Selectors[spec.Name]
		if f == nil {
			return nil, fmt.Errorf("no selector factory named %q", spec.Name)
		}
		return f(seed), nil
	}
	return selector.New(spec, seed)
}

func randUint64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return binary.LittleEndian.Uint64(b[:])
}

func newStateID() *reverbpb.Uint128 {
	for {
		id := &reverbpb.Uint128{High: randUint64(), Low: randUint64()}
		if id.High != 0 || id.Low != 0 {
			return id
		}
	}
}

// Serve accepts connections on l until Shutdown or Close, then returns
// ErrServerClosed. Any other return is a listener failure.
func (s *Server) Serve(l net.Listener) error {
	return s.serve(l, false)
}

func (s *Server) serve(l net.Listener, local bool) error {
	if local {
		s.log.Info("serving local clients, without TLS or tokens", "addr", l.Addr().String(), "tables", s.names)
	} else {
		s.log.Info("reverie serving", "addr", l.Addr().String(), "tables", s.names, "transport", s.cfg.transport(),
			"tls", s.cfg.TLS.Enabled(), "mutual_tls", s.cfg.TLS.ClientCAFile != "", "auth_tokens", s.cfg.Auth.Enabled())
	}
	s.startSnapshotSchedule()
	err := s.grpc.Serve(l)
	if err == nil || errors.Is(err, grpc.ErrServerStopped) {
		return ErrServerClosed
	}
	select {
	case <-s.closing:
		return ErrServerClosed
	default:
	}
	return err
}

// startClosing ends every stream at its next request boundary and fails
// blocked inserts and samples with UNAVAILABLE, so that clients retry
// elsewhere. Unconfirmed items were not applied.
func (s *Server) startClosing() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.ckpt.close()
		s.health.Shutdown()
		for _, t := range s.tables {
			t.Close()
		}
	})
}

// Shutdown drains the server: it stops accepting connections, ends open
// streams at their next request boundary, and waits for handlers to return
// and for a checkpoint being written to be finished. If ctx ends first, it
// stops at once (abandoning such a checkpoint) and returns ctx's error.
// If the write-ahead log did not close cleanly (changes it acknowledged
// may not be on disk), the error wraps ErrWALClose. Shutdown is
// idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.startClosing()
	done := make(chan struct{})
	var walErr error
	go func() {
		s.grpc.GracefulStop()
		s.bg.Wait()
		walErr = s.closeWAL()
		close(done)
	}()
	select {
	case <-done:
		s.closeRemote()
		s.closeStorage()
		return walErr
	case <-ctx.Done():
		s.bgCancel()
		s.grpc.Stop()
		<-done
		s.closeRemote()
		s.closeStorage()
		return errors.Join(ctx.Err(), walErr)
	}
}

// closeStorage closes the chunk store and its spill once no handler or
// checkpoint can read them.
func (s *Server) closeStorage() {
	s.storageClosed.Do(func() {
		if err := s.storage.close(); err != nil {
			s.log.Warn("closing chunk storage", "err", err)
		}
		s.unlockCheckpointDir()
	})
}

// unlockCheckpointDir releases the checkpoint directory's lock, once no
// checkpoint can be written.
func (s *Server) unlockCheckpointDir() {
	if s.ckptLock != nil {
		s.ckptLock.Close()
		s.ckptLock = nil
	}
}

// Close stops the server at once, cancelling every open stream and
// abandoning a checkpoint being written (its directory is removed). Its
// error, as Shutdown's, is the write-ahead log's if it did not close
// cleanly.
func (s *Server) Close() error {
	s.startClosing()
	s.bgCancel()
	s.grpc.Stop()
	s.bg.Wait()
	err := s.closeWAL()
	s.closeRemote()
	s.closeStorage()
	return err
}

// closeWAL writes and fsyncs what the log has queued and closes it. Every
// handler has returned, so nothing more is logged. Its error wraps
// ErrWALClose.
func (s *Server) closeWAL() error {
	if s.wal == nil {
		return nil
	}
	if err := s.wal.Close(); err != nil {
		s.log.Error("write-ahead log did not close cleanly", "dir", s.wal.Dir(), "err", err)
		return fmt.Errorf("%w: %w", ErrWALClose, err)
	}
	return nil
}

// closeRemote releases the snapshot bucket once nothing uses it.
func (s *Server) closeRemote() {
	s.remoteClose.Do(func() {
		if s.remote != nil {
			s.remote.Close()
		}
	})
}

// TableStats returns the running statistics of the named table.
func (s *Server) TableStats(name string) (TableStats, bool) {
	t, ok := s.tables[name]
	if !ok {
		return TableStats{}, false
	}
	return t.stats.Snapshot(), true
}

// ChunkStoreStats reports the number of chunks held and their encoded size.
func (s *Server) ChunkStoreStats() (chunks int, bytes int64) {
	return s.chunks.Len(), s.chunks.Bytes()
}

func (s *Server) table(field, name string) (*serverTable, error) {
	t, ok := s.tables[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s: Priority table %q was not found", ErrTableNotFound, field, name)
	}
	return t, nil
}

// Pending reports how many inserts and samples are blocked on the named
// table's rate limiter.
func (s *Server) Pending(table string) (inserts, samples int, ok bool) {
	t, found := s.tables[table]
	if !found {
		return 0, 0, false
	}
	info := t.Info()
	return info.PendingInserts, info.PendingSamples, true
}
