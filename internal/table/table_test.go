package table

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/leakcheck"
	"github.com/reverie-rl/reverie/internal/ratelimit"
	"github.com/reverie-rl/reverie/selector"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

type fixture struct {
	t      *testing.T
	store  *chunkstore.Store
	table  *Table
	stats  *Stats
	nextCK uint64
}

func newFixture(t *testing.T, sampler, remover selector.Spec, maxSize int64, maxTimes int32, rl ratelimit.Config) *fixture {
	t.Helper()
	s, err := selector.New(sampler, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := selector.New(remover, 2)
	if err != nil {
		t.Fatal(err)
	}
	stats := NewStats()
	tbl, err := New(Config{
		Name: "t", Sampler: s, Remover: r, MaxSize: maxSize, MaxTimesSampled: maxTimes,
		RateLimiter: rl, Extensions: []Extension{stats},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, store: chunkstore.New(), table: tbl, stats: stats, nextCK: 1000}
}

var (
	fifo    = selector.Spec{Kind: selector.KindFIFO}
	lifo    = selector.Spec{Kind: selector.KindLIFO}
	uniform = selector.Spec{Kind: selector.KindUniform}
)

// item makes an item with one fresh one-row chunk in episode ep. The
// returned item holds the only reference to the chunk.
func (f *fixture) item(key uint64, prio float64, ep uint64) Item {
	f.nextCK++
	c := f.store.Insert(&reverbpb.ChunkData{
		ChunkKey:      f.nextCK,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: ep},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:       tensorflowpb.DataType_DT_FLOAT,
			TensorShape: &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: 1}}},
		}}},
		DataTensorsLen: 1,
	})
	return Item{
		Key:      key,
		Priority: prio,
		Trajectory: EncodeTrajectory(&reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
			ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: f.nextCK, Length: 1}},
		}}}),
		Chunks: []*chunkstore.Chunk{c},
	}
}

func (f *fixture) insert(key uint64, prio float64) {
	f.t.Helper()
	if err := f.table.Insert(context.Background(), f.item(key, prio, 7)); err != nil {
		f.t.Fatalf("insert %d: %v", key, err)
	}
}

func (f *fixture) sample(n int) []Sampled {
	f.t.Helper()
	out, err := f.table.Sample(context.Background(), n, 0)
	if err != nil {
		f.t.Fatalf("sample %d: %v", n, err)
	}
	return out
}

func keys(ss []Sampled) []uint64 {
	var ks []uint64
	for _, s := range ss {
		ks = append(ks, s.Item.Key)
	}
	return ks
}

func TestQueueOrderAndLimits(t *testing.T) {
	f := newFixture(t, fifo, fifo, 3, 1, ratelimit.Queue(3))
	for k := uint64(1); k <= 3; k++ {
		f.insert(k, 1)
	}
	// A fourth insert would put 4 unsampled items in a queue of 3.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	blocked := f.item(4, 1, 7)
	if err := f.table.Insert(ctx, blocked); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("insert into full queue: got %v, want deadline exceeded", err)
	}
	blocked.Chunks[0].Unref() // a failed insert leaves the reference with the caller
	got := f.sample(10)
	if want := []uint64{1, 2, 3}; !equalKeys(keys(got), want) {
		t.Fatalf("sampled %v, want %v", keys(got), want)
	}
	for _, s := range got {
		if s.Probability != 1 || s.Item.TimesSampled != 1 {
			t.Errorf("key %d: probability %v times_sampled %d, want 1 and 1", s.Item.Key, s.Probability, s.Item.TimesSampled)
		}
	}
	if got[0].TableSize != 3 || got[2].TableSize != 1 {
		t.Errorf("table sizes %d..%d, want 3..1 (counted before the max_times_sampled delete)", got[0].TableSize, got[2].TableSize)
	}
	if n := f.table.Len(); n != 0 {
		t.Fatalf("after sampling every item once, len = %d, want 0", n)
	}
	if _, err := f.table.Sample(context.Background(), 1, 0); !errors.Is(err, ErrRateLimiterTimeout) {
		t.Fatalf("sample of empty queue with timeout 0: %v, want ErrRateLimiterTimeout", err)
	}
	f.checkNoChunks()
}

func equalKeys(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (f *fixture) checkNoChunks() {
	f.t.Helper()
	if n := f.store.Len(); n != 0 {
		f.t.Fatalf("chunk store holds %d chunks, want 0", n)
	}
	if b := f.store.Bytes(); b != 0 {
		f.t.Fatalf("chunk store holds %d bytes, want 0", b)
	}
}

// TestPrefetchChangesNothing prefetches present and absent keys, on an
// empty and a filled table: the queue order, sizes and chunks must be as
// without it.
func TestPrefetchChangesNothing(t *testing.T) {
	f := newFixture(t, fifo, fifo, 3, 1, ratelimit.Queue(3))
	f.table.Prefetch([]uint64{1, 2, 3})
	for k := uint64(1); k <= 3; k++ {
		f.insert(k, 1)
	}
	f.table.Prefetch([]uint64{1, 2, 3, 99, 0})
	f.table.Prefetch(nil)
	if n := f.table.Len(); n != 3 {
		t.Fatalf("len %d after prefetching, want 3", n)
	}
	if got, want := keys(f.sample(10)), []uint64{1, 2, 3}; !equalKeys(got, want) {
		t.Fatalf("sampled %v, want %v", got, want)
	}
	f.checkNoChunks()

	// A full FIFO table: Prefetch reads ahead the items the inserts will
	// evict (more keys than items held), and the same items go.
	f = newFixture(t, fifo, fifo, 3, 0, ratelimit.MinSize(1))
	for k := uint64(1); k <= 3; k++ {
		f.insert(k, 1)
	}
	f.table.Prefetch([]uint64{4, 5, 6, 7, 8})
	f.insert(4, 1)
	f.insert(5, 1)
	if n := f.table.Len(); n != 3 {
		t.Fatalf("len %d after evicting, want 3", n)
	}
	s := f.sample(1)
	if got := keys(s); !equalKeys(got, []uint64{3}) {
		t.Fatalf("after evicting 2 of 1, 2, 3: the oldest item is %v, want [3]", got)
	}
	s[0].Unpin()
}

// TestDrawAhead checks batches that are drawn ahead (see drawAheadLocked):
// times_sampled counts each sample in order, a deterministic sampler
// keeps returning its item, and the uniform and prioritized samplers keep
// their distributions (a deviation of 5 sigma fails).
func TestDrawAhead(t *testing.T) {
	f := newFixture(t, fifo, fifo, 10, 0, ratelimit.MinSize(1))
	f.insert(1, 1)
	f.insert(2, 1)
	got := f.sample(100)
	for i, s := range got {
		if s.Item.Key != 1 || s.Item.TimesSampled != int32(i+1) {
			t.Fatalf("sample %d: key %d times_sampled %d, want 1 and %d", i, s.Item.Key, s.Item.TimesSampled, i+1)
		}
		s.Unpin()
	}

	for _, tc := range []struct {
		name    string
		sampler selector.Spec
		prio    []float64
	}{
		{"uniform", uniform, []float64{1, 1, 1, 1}},
		{"prioritized", selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 1}, []float64{1, 2, 3, 4}},
	} {
		f := newFixture(t, tc.sampler, fifo, 10, 0, ratelimit.MinSize(1))
		total := 0.0
		for i, p := range tc.prio {
			f.insert(uint64(i), p)
			total += p
		}
		counts := make([]int, len(tc.prio))
		const batches, per = 400, 64
		for range batches {
			for _, s := range f.sample(per) {
				counts[s.Item.Key]++
				s.Unpin()
			}
		}
		n := float64(batches * per)
		for i, p := range tc.prio {
			q := p / total
			want, sigma := n*q, math.Sqrt(n*q*(1-q))
			if d := math.Abs(float64(counts[i]) - want); d > 5*sigma {
				t.Errorf("%s: item %d sampled %d times, want %.0f ± %.0f", tc.name, i, counts[i], want, 5*sigma)
			}
		}
	}
}

func TestStackIsLIFO(t *testing.T) {
	f := newFixture(t, lifo, lifo, 10, 1, ratelimit.Stack(10))
	for k := uint64(1); k <= 4; k++ {
		f.insert(k, 0)
	}
	if got, want := keys(f.sample(4)), []uint64{4, 3, 2, 1}; !equalKeys(got, want) {
		t.Fatalf("sampled %v, want %v", got, want)
	}
}

// TestBlockingAcrossGoroutines follows a Queue(2) table through inserts that
// block until samples free room, and samples that block until inserts come.
func TestBlockingAcrossGoroutines(t *testing.T) {
	f := newFixture(t, fifo, fifo, 2, 1, ratelimit.Queue(2))
	ctx := context.Background()

	sampled := make(chan []Sampled)
	go func() {
		out, err := f.table.Sample(ctx, 5, -1)
		if err != nil {
			t.Error(err)
		}
		sampled <- out
	}()
	waitFor(t, func() bool { return f.table.Info().PendingSamples == 1 })
	f.insert(1, 1)
	if got := <-sampled; !equalKeys(keys(got), []uint64{1}) || !got[0].RateLimited {
		t.Fatalf("blocked sample got %v (rate limited %v), want [1] rate limited", keys(got), got[0].RateLimited)
	}

	f.insert(2, 1)
	f.insert(3, 1)
	inserted := make(chan error)
	go func() { inserted <- f.table.Insert(ctx, f.item(4, 1, 7)) }()
	waitFor(t, func() bool { return f.table.Info().PendingInserts == 1 })
	select {
	case err := <-inserted:
		t.Fatalf("insert into a full queue returned %v", err)
	case <-time.After(10 * time.Millisecond):
	}
	if got := keys(f.sample(1)); !equalKeys(got, []uint64{2}) {
		t.Fatalf("sample got %v, want [2]", got)
	}
	if err := <-inserted; err != nil {
		t.Fatal(err)
	}
	if got := keys(f.sample(5)); !equalKeys(got, []uint64{3, 4}) {
		t.Fatalf("sample got %v, want [3 4]", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSampleTimeoutAndCancel(t *testing.T) {
	f := newFixture(t, uniform, fifo, 10, 0, ratelimit.MinSize(2))
	f.insert(1, 1)
	start := time.Now()
	if _, err := f.table.Sample(context.Background(), 1, 30*time.Millisecond); !errors.Is(err, ErrRateLimiterTimeout) {
		t.Fatalf("got %v, want ErrRateLimiterTimeout", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("timeout returned after %v, before 30ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := f.table.Sample(ctx, 1, -1)
		errc <- err
	}()
	waitFor(t, func() bool { return f.table.Info().PendingSamples == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if n := f.table.Info().PendingSamples; n != 0 {
		t.Fatalf("a cancelled sample stays queued (%d pending)", n)
	}
	// The cancelled request must not eat a sample later.
	f.insert(2, 1)
	if got := f.sample(1); len(got) != 1 {
		t.Fatalf("got %d samples, want 1", len(got))
	}
	if info := f.table.Info(); info.Samples != 1 {
		t.Fatalf("samples counted %d, want 1", info.Samples)
	}
}

func TestCancelledInsertLeavesNoTrace(t *testing.T) {
	f := newFixture(t, fifo, fifo, 1, 1, ratelimit.Queue(1))
	f.insert(1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	it := f.item(2, 1, 7)
	errc := make(chan error)
	go func() { errc <- f.table.Insert(ctx, it) }()
	waitFor(t, func() bool { return f.table.Info().PendingInserts == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// The caller keeps the references of a failed insert.
	for _, c := range it.Chunks {
		c.Unref()
	}
	f.sample(1)
	if info := f.table.Info(); info.Size != 0 || info.Inserts != 1 || info.PendingInserts != 0 {
		t.Fatalf("info %+v: want size 0, 1 insert, nothing pending", info)
	}
	f.checkNoChunks()
}

func TestCloseFailsWaiters(t *testing.T) {
	f := newFixture(t, fifo, fifo, 1, 1, ratelimit.Queue(1))
	f.insert(1, 1)
	errs := make(chan error, 2)
	go func() { errs <- f.table.Insert(context.Background(), f.item(2, 1, 7)) }()
	waitFor(t, func() bool { return f.table.Info().PendingInserts == 1 })
	f.sample(1)
	f.sample(1) // takes item 2, which the freed slot admitted
	go func() {
		_, err := f.table.Sample(context.Background(), 1, -1)
		errs <- err
	}()
	waitFor(t, func() bool { return f.table.Info().PendingSamples == 1 })
	if err := <-errs; err != nil {
		t.Fatalf("admitted insert: %v", err)
	}
	f.table.Close()
	f.table.Close()
	if err := <-errs; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked sample after Close: %v, want ErrClosed", err)
	}
	if err := f.table.Insert(context.Background(), f.item(3, 1, 7)); !errors.Is(err, ErrClosed) {
		t.Fatalf("insert after Close: %v, want ErrClosed", err)
	}
}

func TestEvictionMaxTimesSampledAndResetReleaseChunks(t *testing.T) {
	f := newFixture(t, uniform, fifo, 5, 3, ratelimit.MinSize(1))
	for k := uint64(1); k <= 8; k++ {
		f.insert(k, 1)
	}
	info := f.table.Info()
	if info.Size != 5 || info.Deletes != 3 || info.Inserts != 8 {
		t.Fatalf("after 8 inserts into max_size 5: %+v", info)
	}
	if n := f.store.Len(); n != 5 {
		t.Fatalf("store holds %d chunks, want 5 (evicted items freed theirs)", n)
	}
	// Keys 1..3 were evicted by the FIFO remover.
	for _, s := range f.sample(100) {
		if s.Item.Key <= 3 {
			t.Fatalf("sampled evicted key %d", s.Item.Key)
		}
	}
	for f.table.Len() > 0 {
		f.sample(1)
	}
	f.checkNoChunks()
	if info := f.table.Info(); info.NumEpisodes != 0 || info.NumDeletedEpisodes != 1 {
		t.Fatalf("episodes: %+v, want 0 live and 1 deleted", info)
	}

	for k := uint64(10); k < 15; k++ {
		f.insert(k, 1)
	}
	if err := f.table.Reset(); err != nil {
		t.Fatal(err)
	}
	f.checkNoChunks()
	if info := f.table.Info(); info.Size != 0 || info.Inserts != 0 || info.Samples != 0 || info.Deletes != 0 || info.NumUniqueSamples != 0 {
		t.Fatalf("after reset: %+v", info)
	}
	if s := f.stats.Snapshot(); s.Resets != 1 || s.Items != 0 {
		t.Fatalf("stats after reset: %+v", s)
	}
}

func TestExistingKeyIsPriorityUpdate(t *testing.T) {
	f := newFixture(t, selector.Spec{Kind: selector.KindMaxHeap}, fifo, 10, 0, ratelimit.MinSize(1))
	f.insert(1, 1)
	f.insert(2, 2)
	f.insert(1, 5) // re-sent key: update, not a new item
	info := f.table.Info()
	if info.Size != 2 || info.Inserts != 2 {
		t.Fatalf("info %+v: want size 2 and 2 inserts", info)
	}
	if got := f.sample(1); got[0].Item.Key != 1 || got[0].Item.Priority != 5 {
		t.Fatalf("max heap gave key %d priority %v, want key 1 priority 5", got[0].Item.Key, got[0].Item.Priority)
	}
	if n := f.store.Len(); n != 2 {
		t.Fatalf("store holds %d chunks; the update's chunk should be released", n)
	}
	if s := f.stats.Snapshot(); s.Updates != 1 || s.PrioritySum != 7 {
		t.Fatalf("stats %+v: want 1 update and priority sum 7", s)
	}
}

func TestMutatePriorities(t *testing.T) {
	f := newFixture(t, selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 1}, fifo, 10, 0, ratelimit.MinSize(1))
	for k := uint64(1); k <= 4; k++ {
		f.insert(k, 1)
	}
	if got := f.sample(1)[0].Probability; got != 0.25 {
		t.Fatalf("probability %v, want 0.25", got)
	}
	// A bad priority anywhere in the request changes nothing.
	err := f.table.MutatePriorities([]KeyPriority{{1, 3}, {2, -1}}, []uint64{4})
	if !errors.Is(err, ErrInvalidPriority) {
		t.Fatalf("got %v, want ErrInvalidPriority", err)
	}
	if err := f.table.MutatePriorities([]KeyPriority{{1, math.NaN()}}, nil); !errors.Is(err, ErrInvalidPriority) {
		t.Fatalf("NaN: got %v, want ErrInvalidPriority", err)
	}
	if n := f.table.Len(); n != 4 {
		t.Fatalf("len %d after rejected mutation, want 4", n)
	}
	// Deletes apply before updates; unknown keys are ignored.
	if err := f.table.MutatePriorities([]KeyPriority{{1, 3}, {4, 9}, {99, 1}}, []uint64{4, 98}); err != nil {
		t.Fatal(err)
	}
	if n := f.table.Len(); n != 3 {
		t.Fatalf("len %d, want 3", n)
	}
	for _, s := range f.sample(50) {
		want := map[uint64]float64{1: 0.6, 2: 0.2, 3: 0.2}[s.Item.Key]
		if math.Abs(s.Probability-want) > 1e-12 {
			t.Fatalf("key %d probability %v, want %v", s.Item.Key, s.Probability, want)
		}
	}
	// Inserting a negative priority into a prioritized table fails first.
	if err := f.table.Insert(context.Background(), f.item(5, -1, 7)); !errors.Is(err, ErrInvalidPriority) {
		t.Fatalf("insert with priority -1: %v, want ErrInvalidPriority", err)
	}
}

// TestConcurrentInsertSample hammers one table from several goroutines
// under a sample-to-insert ratio; run it with -race.
func TestConcurrentInsertSample(t *testing.T) {
	f := newFixture(t, uniform, fifo, 100, 0, ratelimit.SampleToInsertRatio(2, 10, 20))
	const writers, perWriter = 4, 250
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var items []Item
	for w := 0; w < writers; w++ {
		mu.Lock()
		for i := 0; i < perWriter; i++ {
			items = append(items, f.item(uint64(w*perWriter+i+1), 1, uint64(w)))
		}
		mu.Unlock()
	}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				if err := f.table.Insert(ctx, items[w*perWriter+i]); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	// Sampling at spi 2 keeps writers going; sample until every insert
	// has been admitted.
	sampled := 0
	for f.table.Info().Inserts < writers*perWriter {
		out, err := f.table.Sample(ctx, 16, time.Millisecond)
		if errors.Is(err, ErrRateLimiterTimeout) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sampled += len(out)
	}
	wg.Wait()
	info := f.table.Info()
	if info.Size != 100 || info.Inserts != writers*perWriter {
		t.Fatalf("info %+v", info)
	}
	if int64(sampled) != info.Samples {
		t.Fatalf("got %d samples, table counted %d", sampled, info.Samples)
	}
	// diff = inserts*spi - samples must stay within [min_diff, max_diff].
	if d := float64(info.Inserts)*2 - float64(info.Samples); d > 40 || d < 0 {
		t.Fatalf("diff %v outside [0, 40]", d)
	}
	if err := f.table.Reset(); err != nil {
		t.Fatal(err)
	}
	f.checkNoChunks()
}

// TestSampleInto: samples go into the caller's buffer when they fit, with
// no allocation, whether taken at once or by a sampler that waited on the
// rate limiter; a buffer too small is replaced.
func TestSampleInto(t *testing.T) {
	f := newFixture(t, uniform, fifo, 100, 0, ratelimit.MinSize(2))
	ctx := context.Background()
	buf := make([]Sampled, 0, 8)

	// Blocked: one item, and MinSize(2).
	f.insert(1, 1)
	got := make(chan []Sampled)
	go func() {
		out, err := f.table.SampleInto(ctx, buf, 3, -1)
		if err != nil {
			t.Error(err)
		}
		got <- out
	}()
	waitFor(t, func() bool { return f.table.Info().PendingSamples == 1 })
	f.insert(2, 1)
	out := <-got
	if len(out) == 0 || len(out) > 3 || &out[0] != &buf[:1][0] || !out[0].RateLimited {
		t.Fatalf("waiting SampleInto: %d samples, in buf %v, rate limited %v", len(out), len(out) > 0 && &out[0] == &buf[:1][0], len(out) > 0 && out[0].RateLimited)
	}
	for i := range out {
		out[i].Unpin()
	}

	// At once, over and over: the buffer's memory, and no allocation.
	allocs := testing.AllocsPerRun(100, func() {
		out, err := f.table.SampleInto(ctx, buf, 8, 0)
		if err != nil || len(out) != 8 || &out[0] != &buf[:1][0] {
			t.Fatalf("SampleInto: %d samples, err %v, in buf %v", len(out), err, len(out) > 0 && &out[0] == &buf[:1][0])
		}
		for i := range out {
			out[i].Unpin()
		}
	})
	if allocs != 0 {
		t.Errorf("SampleInto with a buffer that fits allocates %v times", allocs)
	}

	// A batch larger than the buffer gets memory of its own.
	out, err := f.table.SampleInto(ctx, buf, 20, 0)
	if err != nil || len(out) != 20 {
		t.Fatalf("SampleInto 20 into a buffer of 8: %d samples, err %v", len(out), err)
	}
	for i := range out {
		out[i].Unpin()
	}
}

// resetProbe records how many chunks the store still held when OnReset ran.
type resetProbe struct {
	NoopExtension
	store  *chunkstore.Store
	chunks int
}

func (p *resetProbe) OnReset() { p.chunks = p.store.Len() }

// TestResetReportedBeforeChunksGo: a Reset reaches the extensions before
// the items' chunks are released, as a delete does. Otherwise a client
// could use a released chunk's key for new data, and have that logged,
// before the log records the reset that released it: replay would then
// find the old chunk still held and give the new items its bytes.
func TestResetReportedBeforeChunksGo(t *testing.T) {
	f := newFixture(t, fifo, fifo, 10, 0, ratelimit.MinSize(1))
	probe := &resetProbe{store: f.store, chunks: -1}
	f.table.exts = append(f.table.exts, probe)
	f.insert(1, 1)
	f.insert(2, 1)
	if err := f.table.Reset(); err != nil {
		t.Fatal(err)
	}
	if probe.chunks != 2 {
		t.Fatalf("OnReset saw %d chunks held, want the 2 of the items it reports removed", probe.chunks)
	}
	f.checkNoChunks()
}

// A waiting sampler whose caller has gone is not served by a later
// insert, even when the insert comes before the sampler's goroutine has
// woken to withdraw: on a queue the item would be consumed for nobody.
// The waiter behind it gets the item instead.
func TestCancelledSamplerIsNotServed(t *testing.T) {
	for i := range 50 {
		f := newFixture(t, fifo, fifo, 10, 1, ratelimit.Queue(10))
		gone, cancel := context.WithCancel(context.Background())
		type result struct {
			out []Sampled
			err error
		}
		first, second := make(chan result, 1), make(chan result, 1)
		go func() {
			out, err := f.table.Sample(gone, 1, -1)
			first <- result{out, err}
		}()
		for f.table.Info().PendingSamples < 1 {
			time.Sleep(10 * time.Microsecond)
		}
		go func() {
			out, err := f.table.Sample(context.Background(), 1, 10*time.Second)
			second <- result{out, err}
		}()
		for f.table.Info().PendingSamples < 2 {
			time.Sleep(10 * time.Microsecond)
		}
		cancel()
		f.insert(uint64(i+1), 1)

		r := <-first
		if r.err != context.Canceled || r.out != nil {
			t.Fatalf("round %d: the cancelled sampler got %v, %v; want nil, context.Canceled", i, keys(r.out), r.err)
		}
		r = <-second
		if r.err != nil || len(r.out) != 1 || r.out[0].Item.Key != uint64(i+1) {
			t.Fatalf("round %d: the sampler behind it got %v, %v; want the item", i, keys(r.out), r.err)
		}
		for j := range r.out {
			r.out[j].Unpin()
		}
		f.table.Close()
	}
}
