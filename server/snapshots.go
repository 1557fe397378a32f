package server

// Remote snapshots: checkpoints copied to object storage after they are
// written, on demand and on a schedule, and downloaded at start when they
// are newer than any local checkpoint. internal/remote does the storage;
// docs/formats.md ("Remote snapshots") describes the design.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/reverie-rl/reverie/internal/remote"
)

// Defaults of SnapshotConfig.
const (
	// DefaultSnapshotKeep is how many remote snapshots are kept when
	// SnapshotConfig.Keep is zero.
	DefaultSnapshotKeep = 2
	// DefaultSnapshotTimeout bounds one upload or download when
	// SnapshotConfig.Timeout is zero.
	DefaultSnapshotTimeout = time.Hour
)

// ErrSnapshotUpload: a checkpoint was written to CheckpointDir but could
// not be uploaded as a remote snapshot.
var ErrSnapshotUpload = errors.New("server: snapshot upload failed")

// SnapshotConfig configures remote snapshots: each checkpoint the server
// writes is also uploaded to a bucket, and a server whose CheckpointDir
// has nothing newer restores the newest snapshot at start. The zero value
// keeps no remote snapshots.
type SnapshotConfig struct {
	// URL is the bucket: a gocloud.dev/blob URL with scheme file://, s3://
	// or gs://, optionally with a "prefix" parameter naming a "folder"
	// (e.g. "s3://bucket?region=us-east-1&prefix=trial-7/"). Empty means
	// no remote snapshots. Requires Config.CheckpointDir.
	URL string
	// Interval is the time between scheduled snapshots, each a checkpoint
	// written and uploaded, counted from when Serve is first called. Zero
	// means none: only Checkpoint calls upload.
	Interval time.Duration
	// Keep is how many complete snapshots stay in the bucket; older ones
	// are removed with each upload, before it is marked complete when Keep
	// is 2 or more, so that the bucket never holds more than Keep. Zero
	// means DefaultSnapshotKeep.
	Keep int
	// Timeout bounds one upload, or the listing and download at start.
	// Zero means DefaultSnapshotTimeout.
	Timeout time.Duration
}

func (c SnapshotConfig) keep() int {
	if c.Keep == 0 {
		return DefaultSnapshotKeep
	}
	return c.Keep
}

func (c SnapshotConfig) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultSnapshotTimeout
	}
	return c.Timeout
}

// validate checks the snapshot settings of cfg; errors name the YAML
// fields (see docs/config.md).
func (c SnapshotConfig) validate(cfg *Config) error {
	const field = "remote_snapshots"
	switch {
	case c.Interval < 0:
		return fmt.Errorf("%w: %s.interval: must be >= 0, got %v", ErrInvalidConfig, field, c.Interval)
	case c.Keep < 0:
		return fmt.Errorf("%w: %s.keep: must be >= 0, got %d", ErrInvalidConfig, field, c.Keep)
	case c.Timeout < 0:
		return fmt.Errorf("%w: %s.timeout: must be >= 0, got %v", ErrInvalidConfig, field, c.Timeout)
	}
	if c.URL == "" {
		if c.Interval != 0 || c.Keep != 0 || c.Timeout != 0 {
			return fmt.Errorf("%w: %s.url: interval, keep or timeout is set but url is empty", ErrInvalidConfig, field)
		}
		return nil
	}
	if err := remote.CheckURL(c.URL); err != nil {
		return fmt.Errorf("%w: %s.url: %v", ErrInvalidConfig, field, err)
	}
	if cfg.CheckpointDir == "" {
		return fmt.Errorf("%w: %s.url: requires checkpoint_dir (snapshots are uploaded from it and downloaded into it)", ErrInvalidConfig, field)
	}
	return nil
}

// openSnapshots opens the bucket of Config.Snapshots, if any. It does not
// contact it.
func (s *Server) openSnapshots() error {
	if s.cfg.Snapshots.URL == "" {
		return nil
	}
	// Not a context that ends: a driver may keep the one it opens with
	// (gs:// keeps it for its credentials, and refreshes them with it).
	// Opening does not contact the bucket.
	b, err := remote.Open(context.Background(), s.cfg.Snapshots.URL)
	if err != nil {
		return fmt.Errorf("%w: remote_snapshots.url: %v", ErrInvalidConfig, err)
	}
	s.remote = b
	return nil
}

// uploadSnapshot uploads the checkpoint directory dir and prunes old
// snapshots. It runs in the checkpointer, so uploads never overlap.
func (s *Server) uploadSnapshot(ctx context.Context, dir string) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Snapshots.timeout())
	defer cancel()
	snap, removed, pruneErr, err := s.remote.UploadKeep(ctx, dir, s.cfg.Snapshots.keep())
	if err != nil {
		if s.bgCtx.Err() != nil {
			return fmt.Errorf("snapshot upload abandoned: %w", errShuttingDown)
		}
		return fmt.Errorf("%w: checkpoint %s was written, but: %v", ErrSnapshotUpload, dir, err)
	}
	s.log.Info("snapshot uploaded", "bucket", s.remote.String(), "snapshot", snap.Name,
		"bytes", snap.Size, "duration", time.Since(start).String())
	if pruneErr != nil {
		s.log.Warn("snapshot uploaded, but older snapshots could not all be removed", "bucket", s.remote.String(), "err", pruneErr)
	} else if len(removed) > 0 {
		s.log.Info("old snapshots removed", "bucket", s.remote.String(), "snapshots", removed)
	}
	return nil
}

// startSnapshotSchedule starts the goroutine that takes scheduled
// snapshots, once, unless there is no schedule or the server is closing.
func (s *Server) startSnapshotSchedule() {
	if s.remote == nil || s.cfg.Snapshots.Interval <= 0 {
		return
	}
	c := &s.ckpt
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.scheduled {
		return
	}
	c.scheduled = true
	s.bg.Add(1) // under c.mu with closed false: Shutdown has not begun waiting
	go s.snapshotLoop()
}

// snapshotLoop takes a snapshot every Interval through the checkpointer,
// as a Checkpoint call would, until the server closes. A failed snapshot
// is logged and tried again at the next tick.
func (s *Server) snapshotLoop() {
	defer s.bg.Done()
	tick := time.NewTicker(s.cfg.Snapshots.Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-s.closing:
			return
		case <-s.bgCtx.Done():
			return
		}
		r, err := s.joinCheckpoint()
		if err != nil {
			return // closing
		}
		<-r.done // checkpointLoop always ends the run, even when stopped
		switch {
		case errors.Is(r.err, errShuttingDown):
			return
		case r.err != nil:
			s.log.Warn("scheduled snapshot failed; trying again at the next tick", "err", r.err,
				"interval", s.cfg.Snapshots.Interval.String())
		default:
			s.log.Debug("scheduled snapshot taken", "dir", r.dir)
		}
	}
}

// pullSnapshot decides what restoreAtStart restores when a bucket is
// configured: the newest remote snapshot, downloaded into CheckpointDir, if
// it is newer (by name, which is its UTC time) than local, the newest local
// checkpoint (or ""); else local. A bucket that cannot be listed is an
// error: starting without the data it may hold would let the next uploads
// prune it away.
//
// A snapshot that another server prunes between the listing and the
// download is looked for again, up to pullAttempts times.
func (s *Server) pullSnapshot(local string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Snapshots.timeout())
	defer cancel()
	for attempt := 1; ; attempt++ {
		dir, err := s.pullNewest(ctx, local)
		if !errors.Is(err, remote.ErrNotFound) || attempt == pullAttempts {
			return dir, err
		}
		s.log.Warn("the remote snapshot went away before its download; looking again",
			"bucket", s.remote.String(), "err", err)
	}
}

// pullAttempts bounds pullSnapshot's attempts.
const pullAttempts = 3

// beforeSnapshotDownload, when set, is called with the name of the
// remote snapshot pullNewest is about to download. Tests set it to prune
// that snapshot in between, as another server's schedule may.
var beforeSnapshotDownload func(name string)

func (s *Server) pullNewest(ctx context.Context, local string) (string, error) {
	snap, ok, err := s.remote.Latest(ctx)
	if err != nil {
		return "", fmt.Errorf("cannot look for remote snapshots (pass --restore to start from a local checkpoint without them): %w", err)
	}
	switch {
	case !ok:
		s.log.Info("no remote snapshot", "bucket", s.remote.String())
		return local, nil
	case local != "" && filepath.Base(local) >= snap.Name:
		s.log.Info("the local checkpoint is at least as new as the newest remote snapshot; restoring it",
			"local", local, "remote", snap.Name, "bucket", s.remote.String())
		return local, nil
	}
	if f := beforeSnapshotDownload; f != nil {
		f(snap.Name)
	}
	start := time.Now()
	s.log.Info("downloading remote snapshot", "bucket", s.remote.String(), "snapshot", snap.Name,
		"bytes", snap.Size, "local", local)
	dir, err := s.remote.Download(ctx, snap.Name, s.ckptRoot)
	if err != nil {
		return "", err
	}
	s.log.Info("remote snapshot downloaded and verified", "dir", dir, "duration", time.Since(start).String())
	return dir, nil
}
