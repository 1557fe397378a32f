package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/checkpoint"
	"github.com/reverie-rl/reverie/internal/wal"
	"github.com/reverie-rl/reverie/selector"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

func durableConfig(dir, fsync string) server.Config {
	cfg := ckptConfig(dir, ckptTables()...)
	cfg.WAL = server.WALConfig{Fsync: fsync}
	return cfg
}

// churn changes the ckptTables every way the log records: inserts (with
// evictions from uniform, which holds 150), samples (the queue deletes what
// it serves), a re-sent key (a priority update), updates and deletes. It
// returns the queue keys it inserted, in order, and those it consumed.
func churn(t *testing.T, c reverbpb.ReverbServiceClient, round int) (queued, consumed []uint64) {
	t.Helper()
	base := uint64(round * 1_000_000)
	var reqs []*reverbpb.InsertStreamRequest
	for i := range 60 {
		ck := base + uint64(1+i)
		reqs = append(reqs, &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(ck, base+uint64(i/4), 8)},
			Items: []*reverbpb.PrioritizedItem{
				item(base+uint64(100_000+i), "uniform", 1, ck, 0, 1),
				item(base+uint64(200_000+i), "prio", float64(i%7+1), ck, 1, 2),
			},
			KeepChunkKeys: []uint64{ck},
		})
		if i%2 == 0 { // the queue holds 100: 30 in, 20 out per round
			last := reqs[len(reqs)-1]
			last.Items = append(last.Items, item(base+uint64(300_000+i), "queue", 1, ck, 0, 1))
			queued = append(queued, base+uint64(300_000+i))
		}
	}
	// Re-sending a key is a priority update.
	reqs = append(reqs, &reverbpb.InsertStreamRequest{
		Items: []*reverbpb.PrioritizedItem{item(base+200_059, "prio", 9.5, base+60, 1, 2)},
	})
	if _, err := insertAll(ctxT(t), c, reqs...); err != nil {
		t.Fatal(err)
	}
	sampleAll(t, c, "uniform", 25)
	sampleAll(t, c, "prio", 25)
	for _, s := range sampleAll(t, c, "queue", 20) {
		consumed = append(consumed, s.info.GetItem().GetKey())
	}
	if _, err := c.MutatePriorities(ctxT(t), &reverbpb.MutatePrioritiesRequest{
		Table:      "prio",
		Updates:    []*reverbpb.KeyWithPriority{{Key: base + 200_005, Priority: 40}, {Key: base + 200_006, Priority: 0.5}},
		DeleteKeys: []uint64{base + 200_000, base + 200_002},
	}); err != nil {
		t.Fatal(err)
	}
	return queued, consumed
}

// state is what sameState compares.
type state struct {
	info       []*reverbpb.TableInfo
	chunks     int
	chunkBytes int64
	queue      []uint64           // the queue's keys, in order
	probs      map[uint64]float64 // prioritized keys' probabilities
}

// capture reads a's state. queued and consumed are every churn's.
func capture(t *testing.T, a *servertest.Server, queued, consumed []uint64) state {
	t.Helper()
	st := state{probs: map[uint64]float64{}}
	for _, s := range sampleAll(t, a.Client, "prio", 200) {
		st.probs[s.info.GetItem().GetKey()] = s.info.GetProbability()
	}
	// Sampling changed a: take the rest after it.
	st.info = serverInfo(t, a.Client)
	for _, k := range queued {
		if !slices.Contains(consumed, k) {
			st.queue = append(st.queue, k)
		}
	}
	if n := infoOf(t, st.info, "queue").GetCurrentSize(); int64(len(st.queue)) != n {
		t.Fatalf("fixture: %d queue keys left, the queue holds %d", len(st.queue), n)
	}
	return st
}

// closeAndCount stops a and counts its chunks. Until the log has written
// a chunk it holds a reference, so a count taken while a serves can include
// chunks no item references any more; after Close every record is written.
func closeAndCount(a *servertest.Server, want *state) {
	a.Close()
	want.chunks, want.chunkBytes = a.ChunkStoreStats()
}

// sameState checks that b holds want: ServerInfo, the chunk store, the
// queue's items in order, and every prioritized key's probability.
func sameState(t *testing.T, b *servertest.Server, want state) {
	t.Helper()
	sameInfo(t, serverInfo(t, b.Client), want.info)
	if n, by := b.ChunkStoreStats(); n != want.chunks || by != want.chunkBytes {
		t.Fatalf("chunk store: %d chunks, %d bytes; want %d, %d", n, by, want.chunks, want.chunkBytes)
	}
	matched := 0
	for _, s := range sampleAll(t, b.Client, "prio", 200) {
		p, ok := want.probs[s.info.GetItem().GetKey()]
		if !ok {
			continue
		}
		matched++
		if got := s.info.GetProbability(); math.Abs(got-p) > 1e-12*p {
			t.Fatalf("key %d: probability %v, want %v", s.info.GetItem().GetKey(), got, p)
		}
	}
	if matched < 50 {
		t.Fatalf("only %d prioritized keys in common", matched)
	}
	var got []uint64
	for _, s := range sampleAll(t, b.Client, "queue", len(want.queue)) {
		got = append(got, s.info.GetItem().GetKey())
	}
	if !slices.Equal(got, want.queue) {
		t.Fatalf("queue serves\n %v\nwant\n %v", got, want.queue)
	}
}

// TestDurableRecovery runs a durable server through rounds of changes,
// with a checkpoint between them, stops it without a final checkpoint, and
// checks that a new server on the same directory recovers the same state
// from the checkpoint plus the log.
func TestDurableRecovery(t *testing.T) {
	for _, fsync := range []string{"always", "interval", "never"} {
		t.Run(fsync, func(t *testing.T) {
			dir := t.TempDir()
			a := servertest.Start(t, durableConfig(dir, fsync))
			var queued, consumed []uint64
			q, c := churn(t, a.Client, 1)
			queued, consumed = append(queued, q...), append(consumed, c...)
			checkpointNow(t, a.Client) // the log is cut here
			if _, err := a.Client.Reset(ctxT(t), &reverbpb.ResetRequest{Table: "uniform"}); err != nil {
				t.Fatal(err)
			}
			for round := 2; round <= 4; round++ { // uniform evicts in round 4
				q, c = churn(t, a.Client, round)
				queued, consumed = append(queued, q...), append(consumed, c...)
			}
			want := capture(t, a, queued, consumed)
			if u := infoOf(t, want.info, "uniform"); u.GetNumDeletedEpisodes() == 0 || u.GetCurrentSize() != 150 {
				t.Fatalf("fixture does not exercise the counters: %v", want.info)
			}
			closeAndCount(a, &want)

			b := servertest.Start(t, durableConfig(dir, fsync))
			sameState(t, b, want)
		})
	}
}

// TestDurableLogIsLocked: a second server on a log another one is using
// fails to start, and leaves the first one's log whole; once the first
// has closed, it starts and recovers everything.
func TestDurableLogIsLocked(t *testing.T) {
	dir := t.TempDir()
	a := servertest.Start(t, durableConfig(dir, "always"))
	q1, c1 := churn(t, a.Client, 1)
	_, err := server.New(durableConfig(dir, "always"))
	if !errors.Is(err, server.ErrInvalidConfig) || !errors.Is(err, checkpoint.ErrLocked) || !strings.Contains(err.Error(), "checkpoint_dir") {
		t.Fatalf("second server on the same checkpoint directory: %v; want an error naming checkpoint_dir", err)
	}
	// Nor through a symbolic link to it (the process's lock registry goes
	// by name; found by review).
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(durableConfig(link, "always")); !errors.Is(err, checkpoint.ErrLocked) {
		t.Fatalf("second server through a symbolic link: %v; want the directory refused as in use", err)
	}
	// With a checkpoint directory of its own, it still cannot share the log.
	other := durableConfig(t.TempDir(), "always")
	other.WAL.Dir = filepath.Join(dir, "wal")
	_, err = server.New(other)
	if !errors.Is(err, server.ErrInvalidConfig) || !errors.Is(err, wal.ErrLocked) || !strings.Contains(err.Error(), "wal.dir") {
		t.Fatalf("second server on the same log: %v; want an error naming wal.dir", err)
	}
	q2, c2 := churn(t, a.Client, 2)
	want := capture(t, a, append(q1, q2...), append(c1, c2...))
	closeAndCount(a, &want)
	b := servertest.Start(t, durableConfig(dir, "always"))
	sameState(t, b, want)
	b.Close()

	// The log may live in the checkpoint directory itself: the two locks
	// are different files (found by review: it was refused as in use).
	same := durableConfig(t.TempDir(), "always")
	same.WAL.Dir = same.CheckpointDir
	c := servertest.Start(t, same)
	churn(t, c.Client, 1)
}

// TestDurableRecoveryFromLogOnly recovers a server that never took a
// checkpoint: everything comes from the log.
func TestDurableRecoveryFromLogOnly(t *testing.T) {
	dir := t.TempDir()
	a := servertest.Start(t, durableConfig(dir, "always"))
	q1, c1 := churn(t, a.Client, 1)
	q2, c2 := churn(t, a.Client, 2)
	want := capture(t, a, append(q1, q2...), append(c1, c2...))
	closeAndCount(a, &want)
	b := servertest.Start(t, durableConfig(dir, "always"))
	sameState(t, b, want)
}

// TestDurableLogIsCut checks that a checkpoint removes the segments it
// covers, and that a restart after it replays only what follows.
func TestDurableLogIsCut(t *testing.T) {
	dir := t.TempDir()
	a := servertest.Start(t, durableConfig(dir, "always"))
	churn(t, a.Client, 1)
	walDir := filepath.Join(dir, "wal")
	segs := func() []string {
		ents, err := os.ReadDir(walDir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			if e.Name() != wal.LockFile {
				names = append(names, e.Name())
			}
		}
		return names
	}
	first := segs()
	if len(first) != 1 {
		t.Fatalf("segments before the checkpoint: %v", first)
	}
	checkpointNow(t, a.Client)
	churn(t, a.Client, 2)
	after := segs()
	if len(after) != 1 || after[0] == first[0] {
		t.Fatalf("segments after the checkpoint: %v (before: %v); want one new one", after, first)
	}
	before := serverInfo(t, a.Client)
	a.Close()
	b := servertest.Start(t, durableConfig(dir, "always"))
	sameInfo(t, serverInfo(t, b.Client), before)
}

// TestDurableCorruptLog checks the policy: a torn final record is cut off
// and the server starts; damage anywhere else refuses to start, naming the
// file and offset, and a log that misses records the checkpoint does not
// hold refuses too.
func TestDurableCorruptLog(t *testing.T) {
	setup := func(t *testing.T) (string, string, []*reverbpb.TableInfo) {
		dir := t.TempDir()
		a := servertest.Start(t, durableConfig(dir, "always"))
		churn(t, a.Client, 1)
		before := serverInfo(t, a.Client)
		a.Close()
		segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
		if err != nil || len(segs) != 1 {
			t.Fatalf("wal segments: %v %v", segs, err)
		}
		return dir, segs[0], before
	}
	t.Run("torn tail", func(t *testing.T) {
		dir, seg, _ := setup(t)
		st, _ := os.Stat(seg)
		if err := os.Truncate(seg, st.Size()-3); err != nil {
			t.Fatal(err)
		}
		b := servertest.Start(t, durableConfig(dir, "always"))
		// The last record was a sample of the queue or a delete: the
		// server is up and holds the items.
		if info := serverInfo(t, b.Client); infoOf(t, info, "prio").GetCurrentSize() == 0 {
			t.Fatalf("recovered nothing: %v", info)
		}
	})
	t.Run("flipped byte", func(t *testing.T) {
		dir, seg, _ := setup(t)
		data, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x40
		if err := os.WriteFile(seg, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = server.New(durableConfig(dir, "always"))
		if !errors.Is(err, server.ErrRestore) || !errors.Is(err, wal.ErrCorrupt) || !contains(err.Error(), filepath.Base(seg)) {
			t.Fatalf("got %v, want a corrupt-log error naming %s", err, filepath.Base(seg))
		}
	})
	t.Run("missing records", func(t *testing.T) {
		dir, seg, _ := setup(t)
		// A log that starts after record 1, with no checkpoint.
		if err := os.Rename(seg, filepath.Join(filepath.Dir(seg), "00000000000000000007.wal")); err != nil {
			t.Fatal(err)
		}
		_, err := server.New(durableConfig(dir, "always"))
		if !errors.Is(err, wal.ErrCorrupt) || !contains(err.Error(), "missing") {
			t.Fatalf("got %v, want missing records", err)
		}
	})
}

func TestDurableConfigNeedsCheckpointDir(t *testing.T) {
	cfg := testConfig(ckptTables()...)
	cfg.WAL.Fsync = "always"
	if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) || !contains(err.Error(), "checkpoint_dir") {
		t.Fatalf("got %v", err)
	}
	cfg.CheckpointDir = t.TempDir()
	cfg.WAL.Fsync = "sometimes"
	if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) || !contains(err.Error(), "wal.fsync") {
		t.Fatalf("got %v", err)
	}
}

func infoOf(t *testing.T, infos []*reverbpb.TableInfo, name string) *reverbpb.TableInfo {
	t.Helper()
	for _, ti := range infos {
		if ti.GetName() == name {
			return ti
		}
	}
	t.Fatalf("no table %q in %v", name, infos)
	return nil
}

// TestShutdownReportsALogThatFailed: when the write-ahead log has failed
// (here its directory was removed, so the segment a checkpoint starts
// cannot be created), Shutdown's error says so, wrapping ErrWALClose:
// `reverie serve` then exits 1 rather than 0.
func TestShutdownReportsALogThatFailed(t *testing.T) {
	dir := t.TempDir()
	srv, err := server.New(durableConfig(dir, "always"))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	c := reverbpb.NewReverbServiceClient(servertest.Dial(t, lis.Addr().String()))
	if _, err := insertAll(ctxT(t), c, &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)},
		Items:  []*reverbpb.PrioritizedItem{item(1, "uniform", 1, 1, 0, 1)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
		t.Fatal(err)
	}
	// The checkpoint's mark makes the log start a new segment, in a
	// directory that is gone. The checkpoint itself may fail too.
	_, _ = c.Checkpoint(ctxT(t), &reverbpb.CheckpointRequest{})
	err = srv.Shutdown(ctxT(t))
	<-served
	if !errors.Is(err, server.ErrWALClose) {
		t.Fatalf("Shutdown = %v, want an error wrapping ErrWALClose", err)
	}
}

// TestRestoreRemovalsAreCheckpointed: a durable server restarted with a
// smaller max_size on a table whose remover draws at random evicts some of
// the checkpoint's items, which the log does not record. It checkpoints
// them at start, so that the next start (after a crash, say) holds the
// same items instead of drawing other ones. Items that come back from the
// log alone are trimmed too (they were not, and the table stayed over its
// max_size for good), and their evictions are logged.
func TestRestoreRemovalsAreCheckpointed(t *testing.T) {
	for _, withCheckpoint := range []bool{true, false} {
		t.Run(fmt.Sprintf("checkpoint=%v", withCheckpoint), func(t *testing.T) {
			testRestoreRemovals(t, withCheckpoint)
		})
	}
}

func testRestoreRemovals(t *testing.T, withCheckpoint bool) {
	dir := t.TempDir()
	table := func(max int64) server.TableConfig {
		return server.TableConfig{
			Name:        "t",
			Sampler:     selector.Spec{Kind: selector.KindUniform},
			Remover:     selector.Spec{Kind: selector.KindUniform},
			MaxSize:     max,
			RateLimiter: server.MinSize(1),
		}
	}
	cfg := durableConfig(dir, "always")
	cfg.Tables = []server.TableConfig{table(200)}
	a := servertest.Start(t, cfg)
	var reqs []*reverbpb.InsertStreamRequest
	for k := uint64(1); k <= 150; k++ {
		reqs = append(reqs, &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(k, k, 1)},
			Items:  []*reverbpb.PrioritizedItem{item(k, "t", 1, k, 0, 1)},
		})
	}
	if _, err := insertAll(ctxT(t), a.Client, reqs...); err != nil {
		t.Fatal(err)
	}
	if withCheckpoint {
		checkpointNow(t, a.Client)
	}
	a.Close()

	keys := func(s *servertest.Server) []uint64 {
		seen := map[uint64]bool{}
		for _, smp := range sampleAll(t, s.Client, "t", 3000) {
			seen[smp.info.GetItem().GetKey()] = true
		}
		return slices.Sorted(maps.Keys(seen))
	}
	cfg.Tables = []server.TableConfig{table(100)} // evicts 50 at random
	b := servertest.Start(t, cfg)
	if size := infoOf(t, serverInfo(t, b.Client), "t").GetCurrentSize(); size != 100 {
		t.Fatalf("restarted with max_size 100, the table holds %d items", size)
	}
	want := keys(b)
	b.Close()
	if len(want) != 100 {
		t.Fatalf("sampled %d keys of the 100 left", len(want))
	}
	c := servertest.Start(t, cfg)
	if got := keys(c); !slices.Equal(got, want) {
		t.Fatalf("the next start holds other items than the one before:\n %v\nwant\n %v", got, want)
	}
}

// TestDurableChunkKeyReuse: a chunk key used again once its first chunk is
// released names new data, and recovery from the log must give the new
// item the new data, not the first chunk's.
func TestDurableChunkKeyReuse(t *testing.T) {
	dir := t.TempDir()
	cfg := durableConfig(dir, "always")
	cfg.Tables = []server.TableConfig{{Name: "t", Sampler: selector.Spec{Kind: selector.KindFIFO},
		Remover: selector.Spec{Kind: selector.KindFIFO}, MaxSize: 10, RateLimiter: server.MinSize(1)}}
	a := servertest.Start(t, cfg)
	withData := func(b byte) *reverbpb.ChunkData {
		c := chunk(7, 1, 1)
		c.GetData().GetTensors()[0].TensorContent = []byte{b, b, b, b}
		return c
	}
	if _, err := insertAll(ctxT(t), a.Client, &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{withData(1)}, Items: []*reverbpb.PrioritizedItem{item(1, "t", 1, 7, 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Client.MutatePriorities(ctxT(t), &reverbpb.MutatePrioritiesRequest{Table: "t", DeleteKeys: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.ChunkStoreStats(); n != 0 {
		t.Fatalf("%d chunks held after the only item went", n)
	}
	if _, err := insertAll(ctxT(t), a.Client, &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{withData(2)}, Items: []*reverbpb.PrioritizedItem{item(2, "t", 1, 7, 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	a.Close() // no checkpoint: the restart replays the log
	b := servertest.Start(t, cfg)
	got := sampleAll(t, b.Client, "t", 1)
	if len(got) != 1 || got[0].info.GetItem().GetKey() != 2 {
		t.Fatalf("sampled %v, want item 2", got)
	}
	if want := []byte{2, 2, 2, 2}; !bytes.Equal(got[0].data[0], want) {
		t.Fatalf("item 2's data after recovery: %v, want %v (the chunk it was inserted with)", got[0].data[0], want)
	}
}
