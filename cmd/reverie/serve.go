package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reverie-rl/reverie/server"
)

func runServe(args []string) int {
	fs := flag.NewFlagSet("reverie serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file: reverie YAML (.yaml, .yml) or Reverb reverb_server textproto (.textproto, .pbtxt); default: one table named \"replay\"")
	var port, memoryLimit optionalInt
	fs.Var(&port, "port", fmt.Sprintf("TCP `port`, all interfaces (overrides the config; 0 picks a free port; default %d)", server.DefaultPort))
	listen := fs.String("listen", "", "listen address, overriding port: host:port or unix:///path/sock")
	localListen := fs.String("local-listen", "", "also serve the same tables on this unix socket (unix:///path/sock) for clients on this machine, without TLS or tokens; the socket is made 0660 (overrides the config's local_listen)")
	transport := fs.String("transport", "", "HTTP/2 transport serving gRPC: grpc (gRPC-Go's, the default) or own (reverie's own, experimental: less CPU per large item; docs/transport-plan.md) (overrides the config's transport and $REVERIE_TRANSPORT)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	checkpointDir := fs.String("checkpoint-dir", "", "directory the Checkpoint RPC writes to (overrides the config's checkpoint_dir); at start the newest complete checkpoint in it is restored unless --restore is given")
	restore := fs.String("restore", "", "restore this checkpoint at start: a checkpoint directory (as the Checkpoint RPC returns it) or its checkpoint.rvck file; the server refuses to start if it cannot be restored whole")
	ckptRate := fs.Int64("checkpoint-write-rate", 0, fmt.Sprintf("cap on a checkpoint's writing, bytes per second, so that it disturbs serving less (overrides the config's checkpoint_write_rate; default %d; -1: no cap)", server.DefaultCheckpointWriteRate))
	walFsync := fs.String("wal-fsync", "", "durable mode: log every change to a write-ahead log with this fsync policy: always, interval or never (overrides the config's wal.fsync; needs a checkpoint directory)")
	walInterval := fs.Duration("wal-interval", 0, "fsync interval under --wal-fsync interval (default 100ms)")
	walDir := fs.String("wal-dir", "", "write-ahead log directory (default: the checkpoint directory's wal/)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics on this host:port at /metrics (e.g. :9090); off by default")
	pprofAddr := fs.String("pprof", "", "serve Go's net/http/pprof profiles on this host:port (e.g. localhost:6060); off by default. Bind it to loopback: profiles expose internals")
	drain := fs.Duration("shutdown-timeout", 10*time.Second, "how long a signal lets open streams drain before the server stops hard")
	// Remote snapshots (docs/config.md, remote_snapshots).
	snapURL := fs.String("snapshot-url", "", "bucket URL for remote snapshots (file://, s3:// or gs://, optional ?prefix=dir/); each checkpoint is also uploaded there, and at start the newest snapshot is restored if it is newer than the newest local checkpoint; requires --checkpoint-dir or checkpoint_dir (overrides the config's remote_snapshots.url)")
	snapInterval := fs.Duration("snapshot-interval", 0, "take and upload a checkpoint this often, e.g. 10m (overrides the config's remote_snapshots.interval; default none: only Checkpoint calls upload)")
	snapKeep := fs.Int("snapshot-keep", 0, fmt.Sprintf("remote snapshots to keep (overrides the config's remote_snapshots.keep; default %d)", server.DefaultSnapshotKeep))
	// Storage (overrides the config's storage block field by field).
	storageMode := fs.String("storage-mode", "", "where chunk data lives: memory (default), hybrid (memory up to --memory-limit-bytes, then disk) or disk")
	fs.Var(&memoryLimit, "memory-limit-bytes", "chunk data (`bytes`) held in memory in hybrid and disk modes (disk mode default: 64 MiB)")
	storageDir := fs.String("storage-dir", "", "spill directory of hybrid and disk modes, wiped at start (default: spill/ under the checkpoint dir, else a temporary directory)")
	// TLS and bearer tokens (docs/config.md, tls and auth).
	tlsCert := fs.String("tls-cert", "", "serve TLS with this PEM certificate chain (with --tls-key; overrides the config's tls.cert_file)")
	tlsKey := fs.String("tls-key", "", "the PEM private key of --tls-cert (overrides the config's tls.key_file)")
	tlsClientCA := fs.String("tls-client-ca", "", "mutual TLS: require client certificates signed by these PEM CA certificates (overrides the config's tls.client_ca_file)")
	tokenFile := fs.String("auth-token-file", "", "require the metadata \"authorization: Bearer TOKEN\" on every call but health checks, with a token from this file (one per line; overrides the config's auth.token_file)")
	if err := fs.Parse(args); err != nil {
		return parseStatus(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "reverie serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log, err := newLogger(*logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reverie serve: %v\n", err)
		return 2
	}

	cfg := server.DefaultConfig()
	if *configPath != "" {
		if cfg, err = server.LoadConfigFile(*configPath); err != nil {
			logBadConfig(log, err)
			return 1
		}
	}
	if port.set && (port.v < 0 || port.v > 65535) {
		log.Error("bad flag", "err", fmt.Sprintf("--port: must be in [0, 65535], got %d", port.v))
		return 2
	}
	if *snapInterval < 0 || (*snapInterval > 0 && *snapInterval < server.MinSnapshotSetting) {
		log.Error("bad flag", "err", fmt.Sprintf("--snapshot-interval: must be 0 (no schedule) or at least %v, got %v", server.MinSnapshotSetting, *snapInterval))
		return 2
	}
	if *drain < 0 {
		log.Error("bad flag", "err", fmt.Sprintf("--shutdown-timeout: must be >= 0, got %v", *drain))
		return 2
	}
	if memoryLimit.set && memoryLimit.v < 0 {
		log.Error("bad flag", "err", fmt.Sprintf("--memory-limit-bytes: must be >= 0, got %d", memoryLimit.v))
		return 2
	}
	if port.set {
		// As documented: all interfaces on that port, whatever listen
		// address the config gives (--listen still overrides it).
		cfg.Port, cfg.Listen = int(port.v), ""
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *localListen != "" {
		cfg.LocalListen = *localListen
	}
	if *transport != "" {
		cfg.Transport = *transport
	}
	if *checkpointDir != "" {
		cfg.CheckpointDir = *checkpointDir
	}
	if *ckptRate != 0 {
		cfg.CheckpointWriteRate = *ckptRate
	}
	if *walFsync != "" {
		cfg.WAL.Fsync = *walFsync
	}
	if *walInterval != 0 {
		cfg.WAL.Interval = *walInterval
	}
	if *walDir != "" {
		cfg.WAL.Dir = *walDir
	}
	cfg.RestorePath = *restore
	if *snapURL != "" {
		cfg.Snapshots.URL = *snapURL
	}
	if *snapInterval != 0 {
		cfg.Snapshots.Interval = *snapInterval
	}
	if *snapKeep != 0 {
		cfg.Snapshots.Keep = *snapKeep
	}
	cfg.Logger = log
	if *storageMode != "" {
		cfg.Storage.Mode = server.StorageMode(*storageMode)
	}
	if memoryLimit.set {
		cfg.Storage.MemoryLimitBytes = memoryLimit.v
	}
	if *storageDir != "" {
		cfg.Storage.Dir = *storageDir
	}
	if *tlsCert != "" {
		cfg.TLS.CertFile = *tlsCert
	}
	if *tlsKey != "" {
		cfg.TLS.KeyFile = *tlsKey
	}
	if *tlsClientCA != "" {
		cfg.TLS.ClientCAFile = *tlsClientCA
	}
	if *tokenFile != "" {
		cfg.Auth.TokenFile = *tokenFile
	}
	if cfg.Auth.Enabled() && !cfg.TLS.Enabled() && !strings.HasPrefix(cfg.ListenAddr(), "unix:") { // unix:///path and unix:/path
		log.Warn("bearer tokens without TLS cross the network in the clear; pass --tls-cert and --tls-key")
	}
	if cfg.Validate() == nil {
		if server.GoMemoryLimit(cfg) > 0 {
			// Keep the Go heap near the chunk data limit rather than
			// letting it grow to twice the live heap (GOGC); GOMEMLIMIT
			// overrides.
			log.Info("go memory limit", "bytes", server.SetGoMemoryLimit(cfg))
		} else if lim, from := setMemoryModeLimit(); from != "" {
			// Memory mode: keep the heap within the machine (memlimit.go).
			log.Info("go memory limit", "bytes", lim, "share", machineMemoryShare, "of", from)
		}
	}

	// SIGHUP reloads certificates and tokens (docs/config.md). It is taken
	// before the server is built, which can take long (a checkpoint to
	// restore, a log to replay, a snapshot to download): by default it
	// would end the process. One sent meanwhile reloads once serving.
	hup, done := make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(hup, syscall.SIGHUP)
	defer func() { signal.Stop(hup); close(done) }()

	srv, err := server.New(cfg)
	if errors.Is(err, server.ErrRestore) {
		log.Error("cannot restore checkpoint; not starting (pass --restore with another checkpoint, or move the bad one away)", "err", err)
		return 1
	}
	if err != nil {
		logBadConfig(log, err)
		return 1
	}
	lis, err := server.Listen(cfg.ListenAddr())
	if err != nil {
		log.Error("cannot listen", "addr", cfg.ListenAddr(), "err", err)
		srv.Close() // flushes the write-ahead log, releases the storage
		return 1
	}

	var local net.Listener
	if cfg.LocalListen != "" {
		if local, err = listenLocal(cfg.LocalListen); err != nil {
			log.Error("cannot listen", "local_listen", cfg.LocalListen, "err", err)
			lis.Close()
			srv.Close()
			return 1
		}
	}
	closeListeners := func() {
		lis.Close()
		if local != nil {
			local.Close()
		}
	}

	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, srv, log)
		if err != nil {
			log.Error("cannot serve metrics", "addr", *metricsAddr, "err", err)
			closeListeners()
			srv.Close()
			return 1
		}
		defer stop()
	}
	if *pprofAddr != "" {
		stop, err := servePprof(*pprofAddr, log)
		if err != nil {
			log.Error("cannot serve pprof", "addr", *pprofAddr, "err", err)
			closeListeners()
			srv.Close()
			return 1
		}
		defer stop()
	}

	// Signals are taken before the server serves and logs that it does:
	// a SIGTERM sent as soon as the server answers must drain it, not
	// kill it (a test once did so within that window).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case <-hup:
				if err := srv.ReloadSecurity(); err != nil {
					log.Error("reload failed; keeping the certificates and tokens in use", "err", err)
				}
			case <-done:
				return
			}
		}
	}()

	served, serving := make(chan error, 2), 1
	go func() { served <- srv.Serve(lis) }()
	if local != nil {
		serving++
		go func() { served <- srv.ServeLocal(local) }()
	}
	select {
	case err := <-served:
		log.Error("server stopped", "err", err)
		// Still close it: the write-ahead log writes and fsyncs what
		// it holds, and storage is released.
		if err := srv.Close(); err != nil {
			log.Warn("closing the server", "err", err)
		}
		return 1
	case sig := <-sigs:
		log.Info("draining; a second signal stops at once", "signal", sig.String(), "timeout", drain.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			log.Warn("stopping at once", "signal", sig.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	code := 0
	if err := srv.Shutdown(ctx); err != nil {
		if ctx.Err() != nil {
			log.Warn("drain cut short; open streams were cancelled", "err", ctx.Err())
		}
		if errors.Is(err, server.ErrWALClose) {
			// Logged by the server; the exit status must say so too.
			code = 1
		}
	}
	for range serving {
		if err := <-served; err != nil && !errors.Is(err, server.ErrServerClosed) {
			log.Error("serve", "err", err)
			return 1
		}
	}
	if code != 0 {
		log.Error("stopped, but the write-ahead log did not close cleanly")
		return code
	}
	log.Info("stopped")
	return 0
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", format)
}

// listenLocal opens the local listener, a unix socket that only its owner
// and group may connect to: its clients skip TLS and tokens.
func listenLocal(addr string) (net.Listener, error) {
	// The socket is created 0660 at most (umask 0117), not chmod'ed to it
	// after: in between, a permissive umask would let anyone on the host
	// connect, and keep the connection.
	var l net.Listener
	err := withUmask(0o117, func() (err error) {
		l, err = server.Listen(addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(l.Addr().String(), 0o660); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// logBadConfig logs a config's errors, one record per line: a config file
// with several unknown or duplicate keys reports them all.
func logBadConfig(log *slog.Logger, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		log.Error("bad config", "err", line)
	}
}

// parseStatus is the exit status for a flag parsing error: 0 for -h and
// -help, which print the usage as asked, else 2.
func parseStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// optionalInt is an integer flag that knows whether it was given, so that
// its usage line shows no sentinel default.
type optionalInt struct {
	v   int64
	set bool
}

func (o *optionalInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optionalInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return errors.New("parse error")
	}
	o.v, o.set = v, true
	return nil
}
