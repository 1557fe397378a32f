package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
	"github.com/reverie-rl/reverie/internal/wal"
)

// Durable mode: the write-ahead log (internal/wal) records every change to
// the tables; at start the server restores its newest checkpoint and then
// replays the log records after the checkpoint's position. docs/formats.md
// describes the design and the files.

// ErrWAL is wrapped (with ErrRestore) by errors New returns because the
// write-ahead log could not be replayed whole.
var ErrWAL = errors.New("server: cannot replay write-ahead log")

// ErrWALClose is wrapped by the error of Shutdown and Close when the
// write-ahead log did not close cleanly: a write or fsync failed, so
// changes it acknowledged may not be on disk.
var ErrWALClose = errors.New("server: write-ahead log did not close cleanly")

// newWAL makes the log of a durable config, before the tables (each gets
// the log's extension). It touches no file.
func (s *Server) newWAL() error {
	w := s.cfg.WAL
	if !w.Enabled() {
		return nil
	}
	sync, err := wal.ParseSync(w.Fsync)
	if err != nil {
		return fmt.Errorf("%w: wal.fsync: %v", ErrInvalidConfig, err)
	}
	dir := w.Dir
	if dir == "" {
		dir = filepath.Join(s.cfg.CheckpointDir, "wal")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("%w: wal.dir: %v", ErrInvalidConfig, err)
	}
	trigger := w.CheckpointAfterBytes
	if trigger == 0 {
		trigger = DefaultCheckpointAfterBytes
	}
	s.wal, err = wal.New(wal.Options{
		Dir:         dir,
		Sync:        sync,
		Interval:    w.Interval,
		SizeTrigger: trigger,
		OnSize:      s.autoCheckpoint,
		Logger:      s.log,
	})
	if err != nil {
		return fmt.Errorf("%w: wal: %v", ErrInvalidConfig, err)
	}
	return nil
}

// autoCheckpoint starts a checkpoint (unless one is being written) so that
// the log can be cut. Its outcome is logged by checkpointLoop.
func (s *Server) autoCheckpoint() {
	if _, err := s.joinCheckpoint(); err == nil {
		s.log.Info("write-ahead log passed its size trigger; checkpointing to cut it",
			"checkpoint_after_bytes", s.wal.SizeTrigger())
	}
}

// checkpointAtStart writes a checkpoint and waits for it, before the
// server serves.
func (s *Server) checkpointAtStart() error {
	r, err := s.joinCheckpoint()
	if err != nil {
		return err
	}
	<-r.done
	if errors.Is(r.err, ErrSnapshotUpload) {
		// The local checkpoint, which is what recovery needs, was
		// written; an unreachable bucket must not stop the start.
		s.log.Warn("checkpointed the tables as restored, but the snapshot upload failed", "err", r.err)
		return nil
	}
	if r.err == nil {
		s.log.Info("checkpointed the tables as restored: the config removed items, and the log does not record that", "dir", r.dir)
	}
	return r.err
}

// recoverWAL replays the log after mark, the WAL position of the
// checkpoint just restored (0 for none), and starts the log.
func (s *Server) recoverWAL(mark uint64) error {
	if s.wal == nil {
		return nil
	}
	start := time.Now()
	// The log's chunks, each with one reference held by the loader until
	// the replay ends: the items take their own.
	chunks := make(map[uint64]*chunkstore.Chunk)
	defer func() {
		for _, c := range chunks {
			c.Unref()
		}
	}()
	unknown := map[string]int64{}
	var missing int64 // records for keys their table does not hold
	var firstMissing string
	apply := func(r *wal.Record) error {
		if r.Op == wal.OpChunk {
			m, err := chunkstore.ParseMeta(r.ChunkBytes)
			if err != nil {
				return fmt.Errorf("%w: %s at byte offset %d: chunk: %v", wal.ErrCorrupt, r.File, r.Offset, err)
			}
			// A key logged again names new data: the client used it
			// again once its chunk was released, and the items after
			// this record want this copy. The loader's reference to
			// the old one goes (the log deleted its items before).
			if old := chunks[m.Key]; old != nil {
				old.Unref()
			}
			chunks[m.Key] = s.chunks.InsertEncoded(m, r.ChunkBytes)
			return nil
		}
		t, ok := s.tables[r.Table]
		if !ok {
			unknown[r.Table]++
			return nil
		}
		var err error
		switch r.Op {
		case wal.OpInsert:
			return s.replayInsert(t, r, chunks)
		case wal.OpSample:
			err = t.ReplaySample(r.Key, r.TimesSampled)
		case wal.OpUpdate:
			err = t.ReplayUpdate(r.Key, r.Priority)
		case wal.OpDelete:
			err = t.ReplayDelete(r.Key)
		case wal.OpReset:
			err = t.Reset()
		}
		if err != nil {
			// The config may have shrunk max_size or max_times_sampled
			// since the checkpoint, and the restore removed the item.
			if missing++; missing == 1 {
				firstMissing = fmt.Sprintf("%s:%d: table %q: %v", filepath.Base(r.File), r.Offset, r.Table, err)
			}
		}
		return nil
	}
	rep, err := wal.Replay(s.wal.Dir(), mark, apply)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWAL, err)
	}
	if len(unknown) > 0 {
		var names []string
		for name, n := range unknown {
			names = append(names, fmt.Sprintf("%q (%d records)", name, n))
		}
		sort.Strings(names)
		return fmt.Errorf("%w: the log in %s holds changes to table(s) %s that the config does not declare; "+
			"refusing to start rather than drop them: declare the tables", ErrWAL, s.wal.Dir(), strings.Join(names, ", "))
	}
	if rep.TornBytes > 0 {
		s.log.Warn("write-ahead log ended in a torn record (a crash in the middle of a write); cut it off",
			"file", rep.TornFile, "bytes", rep.TornBytes)
	}
	if missing > 0 {
		s.log.Warn("write-ahead log records name items their table no longer holds (the config removed them at restore); skipped",
			"records", missing, "first", firstMissing)
	}
	if err := s.wal.Start(rep.Last); err != nil {
		return fmt.Errorf("%w: %w", ErrWAL, err)
	}
	// Drop the loader's references before counting, so that the count
	// shows every chunk still held is held by an item.
	for k, c := range chunks {
		c.Unref()
		delete(chunks, k)
	}
	// The replay did what was logged, under the limits of the time: a
	// config with a smaller max_size or max_times_sampled applies now, as
	// it does to a restored checkpoint. The log is started, so these
	// deletes are logged like any other.
	for _, name := range s.names {
		t := s.tables[name]
		over, evicted, added := t.TrimToConfig()
		if over > 0 || evicted > 0 {
			// The deletes are logged, but not the rate limiter's
			// samples it may add: checkpoint at start, as after a
			// restore that removed items.
			s.restoreRemoved = true
			s.log.Warn("replayed items removed to meet the config", "table", name,
				"over_max_times_sampled", over, "evicted_over_max_size", evicted,
				"max_size", t.cfg.MaxSize, "max_times_sampled", t.cfg.MaxTimesSampled)
		}
		if added > 0 {
			s.log.Warn("rate limiter's sample count raised to bring it within the configured max_diff",
				"table", name, "samples_added", added, "max_diff", t.cfg.RateLimiter.MaxDiff)
		}
	}
	var items int64
	for _, name := range s.names {
		items += int64(s.tables[name].Len())
	}
	s.log.Info("write-ahead log replayed", "dir", s.wal.Dir(), "fsync", s.wal.Sync().String(),
		"checkpoint_position", mark, "segments", rep.Segments, "records", rep.Records,
		"last_record", rep.Last, "items", items, "chunks", s.chunks.Len(),
		"duration", time.Since(start).String())
	return nil
}

func (s *Server) replayInsert(t *serverTable, r *wal.Record, chunks map[uint64]*chunkstore.Chunk) error {
	cs, missing, ok := trajectoryChunks(r.TrajectoryBytes, func(key uint64) *chunkstore.Chunk {
		if c := chunks[key]; c != nil {
			return c
		}
		// Restored from the checkpoint: take a reference of our own, as
		// the loader does for the log's chunks.
		c := s.chunks.Get(key)
		if c != nil {
			chunks[key] = c
		}
		return c
	})
	if !ok {
		return fmt.Errorf("%w: %s at byte offset %d: insert of item %d names chunk %d, which neither the checkpoint nor the log holds",
			wal.ErrCorrupt, r.File, r.Offset, r.Key, missing)
	}
	err := t.ReplayInsert(table.Item{
		Key:        r.Key,
		Priority:   r.Priority,
		InsertedAt: r.InsertedAt,
		Trajectory: r.TrajectoryBytes,
		Chunks:     cs,
	})
	if err != nil {
		unrefAll(cs)
		return fmt.Errorf("%w: %s at byte offset %d: table %q: %v", wal.ErrCorrupt, r.File, r.Offset, t.Name(), err)
	}
	return nil
}

// durableLSN is the position a change must reach before it is answered:
// the log's last record (WaitDurable then waits as the fsync policy says),
// or 0 with no log.
func (s *Server) durableLSN() uint64 {
	if s.wal == nil {
		return 0
	}
	return s.wal.Last()
}

// waitDurable waits until the changes made so far are durable under the
// fsync policy, and reports a failed log.
func (s *Server) waitDurable(ctx context.Context) error {
	if s.wal == nil {
		return nil
	}
	if err := s.wal.WaitDurable(ctx, s.durableLSN()); err != nil {
		return fmt.Errorf("write-ahead log: %w", err)
	}
	return nil
}
