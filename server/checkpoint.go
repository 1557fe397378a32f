package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/checkpoint"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
	"github.com/reverie-rl/reverie/internal/wal"
	"github.com/reverie-rl/reverie/selector"
	"google.golang.org/protobuf/proto"
)

// checkpointer runs one checkpoint at a time. A Checkpoint call that
// arrives while one is being written waits for it to end and then shares
// the next one with every other call that arrived meanwhile: each caller
// gets a checkpoint begun after its call, and a burst of calls costs two
// checkpoints, not one per call.
type checkpointer struct {
	mu      sync.Mutex
	running bool
	closed  bool
	next    *checkpointRun // waits for the running one; nil if none
	// scheduled is set once the snapshot schedule has started.
	scheduled bool
}

type checkpointRun struct {
	done    chan struct{}
	waiters int // calls waiting for this run
	dir     string
	err     error
}

func (c *checkpointer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// join returns the run a new Checkpoint call waits for, starting the writer
// goroutine if none is running.
func (s *Server) joinCheckpoint() (*checkpointRun, error) {
	c := &s.ckpt
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errShuttingDown
	}
	if c.running {
		if c.next == nil {
			c.next = &checkpointRun{done: make(chan struct{})}
		}
		c.next.waiters++
		return c.next, nil
	}
	c.running = true
	r := &checkpointRun{done: make(chan struct{})}
	s.bg.Add(1)
	go s.checkpointLoop(r)
	return r, nil
}

func (s *Server) checkpointLoop(r *checkpointRun) {
	defer s.bg.Done()
	for r != nil {
		start := time.Now()
		r.dir, r.err = s.writeCheckpoint(s.bgCtx)
		if r.err == nil && s.remote != nil {
			r.err = s.uploadSnapshot(s.bgCtx, r.dir)
		}
		if r.err != nil && !errors.Is(r.err, errShuttingDown) {
			s.log.Error("checkpoint failed", "dir", s.ckptRoot, "err", r.err)
		}
		if !errors.Is(r.err, errShuttingDown) {
			s.metrics.checkpointDone(start, r.err)
		}
		close(r.done)
		s.ckpt.mu.Lock()
		r, s.ckpt.next = s.ckpt.next, nil
		if r == nil {
			s.ckpt.running = false
		}
		s.ckpt.mu.Unlock()
	}
}

// Checkpoint implements ReverbService: it writes a checkpoint of every
// table to a new directory under CheckpointDir and returns the directory's
// absolute path. Inserts and samples go on while it is written. The
// checkpoint is written by a goroutine of the server, so a caller that
// gives up does not abandon it. With remote snapshots configured, it
// answers once the checkpoint is also uploaded; if the upload fails, it
// answers UNAVAILABLE (ErrSnapshotUpload), though the local checkpoint
// was written.
func (s *Server) Checkpoint(ctx context.Context, _ *reverbpb.CheckpointRequest) (*reverbpb.CheckpointResponse, error) {
	if s.ckptRoot == "" {
		return nil, toStatus(ErrNoCheckpointDir)
	}
	r, err := s.joinCheckpoint()
	if err != nil {
		return nil, toStatus(err)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, toStatus(ctx.Err())
	}
	if r.err != nil {
		return nil, toStatus(r.err)
	}
	return &reverbpb.CheckpointResponse{CheckpointPath: r.dir}, nil
}

func (s *Server) checkpointHook(stage, table string) {
	if s.hooks.checkpoint != nil {
		s.hooks.checkpoint(stage, table)
	}
}

// writeCheckpoint writes one checkpoint and prunes the older ones. See
// docs/formats.md for the design.
func (s *Server) writeCheckpoint(ctx context.Context) (string, error) {
	start := time.Now()
	ts := make([]*table.Table, len(s.names))
	for i, name := range s.names {
		ts[i] = s.tables[name].Table
	}
	// One instant for every table: BeginSnapshots holds all their locks
	// at once, for the time it takes to record counters.
	var mark uint64 // the log's position at the snapshots
	var at func()
	if s.wal != nil {
		at = func() { mark = s.wal.Mark() }
	}
	snaps, err := table.BeginSnapshotsAt(at, ts...)
	if err != nil {
		if errors.Is(err, table.ErrClosed) {
			return "", errShuttingDown
		}
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		for _, sn := range snaps {
			sn.Release() // stops copy-on-write if we fail early
		}
		// While the snapshot was held, items evicted under load stayed
		// live until written, and the collector set its next goal (about
		// twice the live heap) from that peak. Left alone, the heap grows
		// to that goal after the checkpoint, into fresh memory: a 2 GiB
		// table's server went from 4.8 to 7.0 GiB after one, and the
		// page faults doubled the load's p99 latency. A collection now
		// sets the goal from what is live again.
		go runtime.GC()
	}()
	s.checkpointHook("snapshot", "")

	w, err := checkpoint.Create(s.ckptRoot, start)
	if err != nil {
		return "", err
	}
	var items, chunkBytes int64
	pace := newPacer(ctx, s.cfg.checkpointRate())
	var cs table.SnapshotStats // summed over the tables; MaxHold is the max
	var keys []uint64          // scratch: an item's chunk keys
	var itemEnc []byte         // scratch: an item's encoding
	for i, sn := range snaps {
		st := s.tables[s.names[i]]
		sn.Capture()
		cs.Pages += sn.Stats.Pages
		cs.CopiedOnWrite += sn.Stats.CopiedOnWrite
		cs.Capture += sn.Stats.Capture
		cs.MaxHold = max(cs.MaxHold, sn.Stats.MaxHold)
		s.checkpointHook("captured", st.Name())
		if ctx.Err() != nil {
			w.Abort()
			return "", fmt.Errorf("checkpoint abandoned: %w", errShuttingDown)
		}
		w.BeginTable(tableCheckpointHeader(sn.Info, st.cfg))
		n := 0
		for it := range sn.Items() {
			for _, c := range it.Chunks {
				if !w.HasChunk(c.Key()) {
					enc, err := c.Encoded()
					if err != nil {
						w.Abort()
						return "", fmt.Errorf("table %q, item %d: %w", st.Name(), it.Key, err)
					}
					w.ChunkEncoded(c.Key(), enc) // as received: no re-encoding
					chunkBytes += int64(c.Size())
					pace.wrote(c.Size())
					if ctx.Err() != nil { // the pacer's sleep ends early then
						w.Abort()
						return "", fmt.Errorf("checkpoint abandoned: %w", errShuttingDown)
					}
				}
			}
			keys = keys[:0]
			for _, c := range it.Chunks {
				keys = append(keys, c.Key())
			}
			itemEnc = appendItem(itemEnc[:0], st.Name(), it)
			if err := w.ItemEncoded(it.Key, keys, itemEnc); err != nil {
				break
			}
			if n++; n == 1 {
				s.checkpointHook("item", st.Name())
			}
			if n%1024 == 0 && ctx.Err() != nil {
				w.Abort()
				return "", fmt.Errorf("checkpoint abandoned: %w", errShuttingDown)
			}
		}
		if err := w.EndTable(); err != nil {
			w.Abort()
			return "", err
		}
		items += int64(n)
		sn.Release()
		s.checkpointHook("table-end", st.Name())
	}
	written := time.Now()
	w.SetWALPosition(mark)
	dir, err := w.Commit()
	if err != nil {
		return "", err
	}
	if s.wal != nil {
		// The checkpoint is durable: the log before it can go.
		s.wal.Cut(mark)
	}
	synced := time.Since(written)
	if err := checkpoint.Prune(s.ckptRoot, dir); err != nil {
		s.log.Warn("checkpoint written, but older checkpoints could not all be removed", "dir", dir, "err", err)
	}
	size := int64(-1)
	if fi, err := os.Stat(filepath.Join(dir, checkpoint.FileName)); err == nil {
		size = fi.Size()
	}
	s.log.Info("checkpoint written", "dir", dir, "tables", len(snaps), "items", items,
		"chunk_bytes", chunkBytes, "file_bytes", size, "duration", time.Since(start).String(),
		"pages", cs.Pages, "pages_copied_on_write", cs.CopiedOnWrite, "capture", cs.Capture.String(),
		"max_lock_hold", cs.MaxHold.String(), "fsync_and_rename", synced.String(), "wal_position", mark)
	return dir, nil
}

// tableCheckpointHeader describes a table as of its snapshot.
func tableCheckpointHeader(info table.Info, tc TableConfig) *reverbpb.PriorityTableCheckpoint {
	h := &reverbpb.PriorityTableCheckpoint{
		TableName: info.Name,
		RateLimiter: &reverbpb.RateLimiterCheckpoint{
			SamplesPerInsert: info.RateLimiter.SamplesPerInsert,
			MinDiff:          info.RateLimiter.MinDiff,
			MaxDiff:          info.RateLimiter.MaxDiff,
			MinSizeToSample:  info.RateLimiter.MinSizeToSample,
			SampleCount:      info.Samples,
			InsertCount:      info.Inserts,
			DeleteCount:      info.Deletes,
		},
		Sampler:            SelectorSpecToProto(info.Sampler),
		Remover:            SelectorSpecToProto(info.Remover),
		MaxSize:            info.MaxSize,
		MaxTimesSampled:    info.MaxTimesSampled,
		NumDeletedEpisodes: info.NumDeletedEpisodes,
		NumUniqueSamples:   info.NumUniqueSamples,
	}
	if tc.Signature != nil {
		h.Signature = tc.Signature
	}
	return h
}

// restoreAtStart restores Config.RestorePath, or else the newest complete
// checkpoint in CheckpointDir or, if it is newer, the newest remote
// snapshot, if any. It returns the checkpoint's write-ahead log position
// (0 if none).
func (s *Server) restoreAtStart() (uint64, error) {
	path := s.cfg.RestorePath
	if path == "" && s.ckptRoot != "" {
		latest, err := checkpoint.Latest(s.ckptRoot)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrRestore, err)
		}
		// A local write-ahead log continues the local checkpoints only:
		// with one, a remote snapshot (perhaps another server's) is not
		// considered.
		localLog := false
		if s.wal != nil {
			if localLog, err = wal.HasSegments(s.wal.Dir()); err != nil {
				return 0, fmt.Errorf("%w: %v", ErrRestore, err)
			}
		}
		if s.remote != nil && !localLog {
			if latest, err = s.pullSnapshot(latest); err != nil {
				return 0, fmt.Errorf("%w: %w", ErrRestore, err)
			}
		} else if s.remote != nil {
			s.log.Info("a local write-ahead log exists; restoring the local checkpoint and log, not a remote snapshot", "wal_dir", s.wal.Dir())
		}
		path = latest
	}
	if path == "" {
		return 0, nil
	}
	mark, err := s.restore(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	return mark, nil
}

// restore loads the checkpoint at path into the new, unserved tables. It
// verifies the whole file before it applies anything; an error leaves the
// server unusable, and New discards it.
func (s *Server) restore(path string) (uint64, error) {
	start := time.Now()
	file, err := checkpoint.Resolve(path)
	if err != nil {
		return 0, err
	}
	sum, err := checkpoint.Verify(file)
	if err != nil {
		return 0, err
	}
	verified := time.Since(start)
	var unknown []string
	var lost int64
	for _, ts := range sum.Tables {
		if _, ok := s.tables[ts.Header.GetTableName()]; !ok {
			unknown = append(unknown, fmt.Sprintf("%q (%d items)", ts.Header.GetTableName(), ts.Items))
			lost += ts.Items
		}
	}
	if len(unknown) > 0 {
		return 0, fmt.Errorf("checkpoint %s holds table(s) %s that the config does not declare; "+
			"refusing to start rather than drop %d items: declare the tables, or restore another checkpoint",
			file, strings.Join(unknown, ", "), lost)
	}
	restored := make(map[string]bool, len(sum.Tables))
	for _, ts := range sum.Tables {
		name := ts.Header.GetTableName()
		restored[name] = true
		if diffs := optionDiffs(ts.Header, s.tables[name].cfg); len(diffs) > 0 {
			s.log.Warn("checkpoint table options differ from the config; the config wins",
				"table", name, "differences", strings.Join(diffs, "; "))
		}
	}
	for _, name := range s.names {
		if !restored[name] {
			s.log.Info("table is not in the checkpoint; it starts empty", "table", name, "checkpoint", file)
		}
	}

	chunks := make(map[uint64]*chunkstore.Chunk, sum.Chunks)
	defer func() {
		// Items took their own references; drop the loader's.
		for _, c := range chunks {
			c.Unref()
		}
	}()
	var cur *serverTable
	var hdr *reverbpb.PriorityTableCheckpoint
	// The position comes from this pass, the one applied: the file may
	// have been replaced since Verify read it.
	loaded, err := checkpoint.Read(file, func(r *checkpoint.Record) error {
		switch r.Kind {
		case checkpoint.KindTable:
			hdr, cur = r.Table, s.tables[r.Table.GetTableName()]
			if cur == nil {
				return fmt.Errorf("table record at byte offset %d: table %q is not declared (the file changed since it was verified?)",
					r.Offset, r.Table.GetTableName())
			}
			return cur.BeginRestore()
		case checkpoint.KindChunk:
			m, err := chunkstore.ParseMeta(r.ChunkBytes) // cannot fail: Read checked the encoding
			if err != nil {
				return fmt.Errorf("chunk record at byte offset %d: %v", r.Offset, err)
			}
			chunks[m.Key] = s.chunks.InsertEncoded(m, r.ChunkBytes)
		case checkpoint.KindItem:
			return restoreItem(cur, r, chunks)
		case checkpoint.KindTableEnd:
			rl := hdr.GetRateLimiter()
			rep := cur.FinishRestore(table.RestoreCounters{
				Inserts:            rl.GetInsertCount(),
				Samples:            rl.GetSampleCount(),
				NumDeletedEpisodes: hdr.GetNumDeletedEpisodes(),
				NumUniqueSamples:   hdr.GetNumUniqueSamples(),
			})
			if rep.Inserts != rl.GetInsertCount() || rep.Deletes != rl.GetDeleteCount() {
				s.log.Warn("checkpoint rate limiter counters disagree with its items; set so that the limiter counts the items loaded",
					"table", cur.Name(), "items", rep.Loaded,
					"checkpoint_inserts", rl.GetInsertCount(), "checkpoint_deletes", rl.GetDeleteCount(),
					"inserts", rep.Inserts, "deletes", rep.Deletes)
			}
			if rep.OverSampled > 0 || rep.Evicted > 0 {
				s.restoreRemoved = true
				s.log.Warn("restored items removed to meet the config", "table", cur.Name(),
					"over_max_times_sampled", rep.OverSampled, "evicted_over_max_size", rep.Evicted,
					"max_size", cur.cfg.MaxSize, "max_times_sampled", cur.cfg.MaxTimesSampled)
			}
			if rep.SamplesAdded > 0 {
				s.log.Warn("rate limiter's sample count raised to bring it within the configured max_diff",
					"table", cur.Name(), "samples_added", rep.SamplesAdded, "max_diff", cur.cfg.RateLimiter.MaxDiff)
			}
			s.log.Info("table restored", "table", cur.Name(), "items", rep.Loaded-rep.OverSampled-rep.Evicted,
				"inserts", rep.Inserts, "samples", rep.Samples)
			cur, hdr = nil, nil
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.log.Info("checkpoint restored", "path", file, "tables", len(loaded.Tables), "items", loaded.Items,
		"chunks", loaded.Chunks, "file_bytes", loaded.Size, "wal_position", loaded.WALPosition,
		"duration", time.Since(start).String(), "verify", verified.String())
	return loaded.WALPosition, nil
}

func restoreItem(t *serverTable, r *checkpoint.Record, chunks map[uint64]*chunkstore.Chunk) error {
	pi := r.Item
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: table %q: item %d at byte offset %d: %s", checkpoint.ErrCorrupt, t.Name(), pi.GetKey(), r.Offset, fmt.Sprintf(format, args...))
	}
	// Verify checked that every chunk is there; the slices are checked as
	// an insert's are, so that no item is restored that every sample of
	// would fail.
	traj := table.EncodeTrajectory(pi.GetFlatTrajectory())
	if _, err := checkTrajectory(traj, chunks); err != nil {
		if err.notHeld {
			return bad("flat_trajectory.%s: chunk %d is not in the checkpoint", err.field, err.key)
		}
		return bad("flat_trajectory.%s", err.reason())
	}
	if pi.GetTimesSampled() < 0 {
		return bad("times_sampled %d is negative", pi.GetTimesSampled())
	}
	var insertedAt int64
	if ts := pi.GetInsertedAt(); ts != nil {
		// UnixNano holds years 1678 to 2262 only.
		if err := ts.CheckValid(); err != nil || ts.GetSeconds() <= math.MinInt64/int64(time.Second) || ts.GetSeconds() >= math.MaxInt64/int64(time.Second) {
			return bad("inserted_at %v is out of range", ts.AsTime())
		}
		insertedAt = ts.AsTime().UnixNano()
	}
	cs, _, _ := trajectoryChunks(traj, func(key uint64) *chunkstore.Chunk { return chunks[key] })
	err := t.RestoreItem(table.Item{
		Key:          pi.GetKey(),
		Priority:     pi.GetPriority(),
		TimesSampled: pi.GetTimesSampled(),
		InsertedAt:   insertedAt,
		Trajectory:   traj,
		Chunks:       cs,
	})
	if err != nil {
		unrefAll(cs)
		return fmt.Errorf("table %q: item record at byte offset %d: %w", t.Name(), r.Offset, err)
	}
	return nil
}

// optionDiffs lists the table options on which a checkpoint and the config
// disagree.
func optionDiffs(h *reverbpb.PriorityTableCheckpoint, tc TableConfig) []string {
	var d []string
	for _, sel := range []struct {
		name string
		ckpt *reverbpb.KeyDistributionOptions
		cfg  selector.Spec
	}{{"sampler", h.GetSampler(), tc.Sampler}, {"remover", h.GetRemover(), tc.Remover}} {
		ckpt := "none"
		if spec, err := SelectorSpecFromProto(sel.ckpt); err == nil {
			ckpt = specString(spec)
		}
		if cfg := specString(sel.cfg); ckpt != cfg {
			d = append(d, fmt.Sprintf("%s: checkpoint %s, config %s", sel.name, ckpt, cfg))
		}
	}
	if h.GetMaxSize() != tc.MaxSize {
		d = append(d, fmt.Sprintf("max_size: checkpoint %d, config %d", h.GetMaxSize(), tc.MaxSize))
	}
	if h.GetMaxTimesSampled() != tc.MaxTimesSampled {
		d = append(d, fmt.Sprintf("max_times_sampled: checkpoint %d, config %d", h.GetMaxTimesSampled(), tc.MaxTimesSampled))
	}
	rl := h.GetRateLimiter()
	ckptRL := RateLimiter{SamplesPerInsert: rl.GetSamplesPerInsert(), MinSizeToSample: rl.GetMinSizeToSample(), MinDiff: rl.GetMinDiff(), MaxDiff: rl.GetMaxDiff()}
	if ckptRL != tc.RateLimiter {
		d = append(d, fmt.Sprintf("rate_limiter: checkpoint %+v, config %+v", ckptRL, tc.RateLimiter))
	}
	if !proto.Equal(h.GetSignature(), tc.Signature) {
		d = append(d, "signature: differs")
	}
	return d
}

func specString(s selector.Spec) string {
	switch s.Kind {
	case selector.KindPrioritized:
		return fmt.Sprintf("prioritized(priority_exponent=%v)", s.PriorityExponent)
	case selector.KindCustom:
		return fmt.Sprintf("custom(%s)", s.Name)
	}
	return s.Kind.String()
}

// pacer holds a writer to a byte rate by sleeping. A checkpoint written as
// fast as the disk takes it competes with serving for the cores, the page
// cache and the disk; paced, the same bytes disturb it far less (see
// docs/formats.md, Figures). It is a token bucket: the writer may run at
// most pacerStep bytes ahead of the rate before it sleeps, so it never
// holds a core for longer than about pacerStep/rate at a time, and a
// writer that fell behind (the cores were busy serving) does not make up
// for it in a burst: it may lag the rate by at most pacerMaxLag, and
// what lies beyond is forgiven.
type pacer struct {
	rate  float64 // bytes per second; <= 0 means no limit
	start time.Time
	bytes int64
	next  int64 // bytes at which to check the clock again

	now   func() time.Time // time.Now; tests replace both
	sleep func(time.Duration)
}

const (
	// pacerStep is how many bytes the writer goes between looks at the
	// clock: 256 KiB, 2 ms at the default rate.
	pacerStep = 256 << 10
	// pacerMaxLag is how far behind the rate a writer may fall and still
	// catch up at full speed.
	pacerMaxLag = 2 * time.Millisecond
)

// newPacer returns a pacer whose sleeps end early when ctx is done, so
// that a server closing does not wait for a slow rate's sleep.
func newPacer(ctx context.Context, rate int64) *pacer {
	sleep := func(d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return &pacer{rate: float64(rate), start: time.Now(), now: time.Now, sleep: sleep}
}

func (p *pacer) wrote(n int) {
	p.bytes += int64(n)
	if p.rate <= 0 || p.bytes < p.next {
		return
	}
	p.next = p.bytes + pacerStep
	due := p.start.Add(time.Duration(float64(p.bytes) / p.rate * float64(time.Second)))
	now := p.now()
	if ahead := due.Sub(now); ahead > 0 {
		p.sleep(ahead)
		return
	}
	if lag := now.Sub(due); lag > pacerMaxLag {
		p.start = p.start.Add(lag - pacerMaxLag)
	}
}
