package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/ratelimit"
	"github.com/reverie-rl/reverie/selector"
)

// reference is a table's state copied under its lock.
type reference struct {
	info  Info
	items map[uint64]Item
}

func (t *Table) referenceLocked() reference {
	r := reference{info: t.infoLocked(), items: make(map[uint64]Item, t.mu.keys.len())}
	t.mu.keys.all(func(key uint64, slot selector.Slot) {
		r.items[key] = *t.mu.items.at(slot)
	})
	return r
}

func sameItem(a, b Item) bool {
	return a.Key == b.Key && a.Priority == b.Priority && a.TimesSampled == b.TimesSampled &&
		a.InsertedAt == b.InsertedAt && a.Seq == b.Seq && bytes.Equal(a.Trajectory, b.Trajectory) && slices.Equal(a.Chunks, b.Chunks)
}

// checkSnapshot compares a captured snapshot with the reference taken when
// it began.
func checkSnapshot(t *testing.T, sn *Snapshot, ref reference) {
	t.Helper()
	if sn.Info != ref.info {
		t.Fatalf("snapshot info %+v, want %+v", sn.Info, ref.info)
	}
	n := 0
	var lastSeq uint64
	for it := range sn.Items() {
		want, ok := ref.items[it.Key]
		if !ok {
			t.Fatalf("snapshot holds key %d, which the table did not hold at the snapshot", it.Key)
		}
		if !sameItem(*it, want) {
			t.Fatalf("key %d: snapshot %+v, want %+v", it.Key, *it, want)
		}
		if n > 0 && it.Seq <= lastSeq {
			t.Fatalf("items out of Seq order: %d after %d", it.Seq, lastSeq)
		}
		lastSeq = it.Seq
		n++
	}
	if n != len(ref.items) || n != sn.Len() {
		t.Fatalf("snapshot yielded %d items, want %d (Len %d)", n, len(ref.items), sn.Len())
	}
}

// TestSnapshotConsistentUnderMutation takes a snapshot of a table of ten
// pages while goroutines insert (with evictions), sample (with
// max_times_sampled deletes), update priorities, delete and reset, and
// checks that the snapshot is the table at the instant it began.
func TestSnapshotConsistentUnderMutation(t *testing.T) {
	for _, withReset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", withReset), func(t *testing.T) {
			const size = 10 * pageSize
			f := newFixture(t, uniform, fifo, size, 3, ratelimit.MinSize(1))
			for k := uint64(1); k <= size-100; k++ {
				f.insert(k, float64(k%7))
			}
			var ref reference
			f.table.hooks.onSnapshot = func() { ref = f.table.referenceLocked() }
			f.table.hooks.onCapture = func(int) {
				// Let the mutators at the table between pages.
				time.Sleep(200 * time.Microsecond)
				runtime.Gosched()
			}

			var ops atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var itemMu sync.Mutex // the fixture's item maker is not concurrent
			nextKey := atomic.Uint64{}
			nextKey.Store(1 << 40)
			ctx := context.Background()
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for {
						select {
						case <-stop:
							return
						default:
						}
						switch rng.IntN(3) {
						case 0:
							itemMu.Lock()
							it := f.item(nextKey.Add(1), 1, uint64(rng.IntN(50)))
							itemMu.Unlock()
							if err := f.table.Insert(ctx, it); err != nil {
								t.Error(err)
								return
							}
						case 1:
							if _, err := f.table.Sample(ctx, 8, 0); err != nil && !errors.Is(err, ErrRateLimiterTimeout) {
								t.Error(err)
								return
							}
						case 2:
							k := uint64(rng.IntN(size)) + 1
							if err := f.table.MutatePriorities([]KeyPriority{{k, 42}, {k + 1, 43}}, []uint64{k + 2}); err != nil {
								t.Error(err)
								return
							}
						}
						ops.Add(1)
					}
				}()
			}
			waitFor(t, func() bool { return ops.Load() > 200 })
			snaps, err := BeginSnapshots(f.table)
			if err != nil {
				t.Fatal(err)
			}
			sn := snaps[0]
			before := ops.Load()
			// Mutate with every page still missing (and reset the table,
			// which completes the snapshot at once), then capture.
			waitFor(t, func() bool { return ops.Load() > before+1000 })
			if withReset {
				if err := f.table.Reset(); err != nil {
					t.Fatal(err)
				}
			}
			sn.Capture()
			close(stop)
			wg.Wait()
			if t.Failed() {
				return
			}
			t.Logf("%d operations during the snapshot", ops.Load()-before)
			checkSnapshot(t, sn, ref)
			if _, err := BeginSnapshots(f.table); err != nil {
				t.Fatalf("second snapshot after Capture: %v", err)
			}
		})
	}
}

func TestBeginSnapshotsErrors(t *testing.T) {
	a := newFixture(t, uniform, fifo, 10, 0, ratelimit.MinSize(1))
	b := newFixture(t, uniform, fifo, 10, 0, ratelimit.MinSize(1))
	a.insert(1, 1)
	if _, err := BeginSnapshots(a.table, a.table); err == nil {
		t.Fatal("a table listed twice was accepted")
	}
	snaps, err := BeginSnapshots(a.table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BeginSnapshots(b.table, a.table); !errors.Is(err, ErrSnapshotInProgress) {
		t.Fatalf("second snapshot: %v, want ErrSnapshotInProgress", err)
	}
	// The failed call installed nothing on b.
	if _, err := BeginSnapshots(b.table); err != nil {
		t.Fatalf("b after the failed call: %v", err)
	}
	snaps[0].Capture()
	b.table.Close()
	if _, err := BeginSnapshots(b.table); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed table: %v, want ErrClosed", err)
	}
}

// TestSnapshotForgetsYieldedItems: the chunks of items that the table
// evicted after the snapshot stay reachable until Items has yielded them,
// and not after, without waiting for Release.
func TestSnapshotForgetsYieldedItems(t *testing.T) {
	const n = 8
	f := newFixture(t, fifo, fifo, n, 0, ratelimit.MinSize(1))
	for k := uint64(1); k <= n; k++ {
		f.insert(k, 1)
	}
	chunks := make(map[uint64]weak.Pointer[chunkstore.Chunk], n)
	f.table.mu.Lock()
	for key, it := range f.table.referenceLocked().items {
		chunks[key] = weak.Make(it.Chunks[0])
	}
	f.table.mu.Unlock()
	snaps, err := BeginSnapshots(f.table)
	if err != nil {
		t.Fatal(err)
	}
	sn := snaps[0]
	defer sn.Release()
	sn.Capture()
	for k := uint64(n + 1); k <= 2*n; k++ {
		f.insert(k, 1) // evicts key k-n
	}
	alive := func(key uint64) bool { return chunks[key].Value() != nil }
	var got uint64
	for it := range sn.Items() {
		got++
		if it.Key != got {
			t.Fatalf("item %d has key %d", got, it.Key)
		}
		runtime.GC()
		for key := uint64(1); key <= n; key++ {
			if want := key >= got; alive(key) != want {
				t.Fatalf("while item %d is yielded: chunk of evicted item %d reachable=%v, want %v", got, key, !want, want)
			}
		}
	}
	if got != n {
		t.Fatalf("yielded %d items, want %d", got, n)
	}
	runtime.GC()
	for key := uint64(1); key <= n; key++ {
		if alive(key) {
			t.Fatalf("after Items, before Release: chunk of evicted item %d still reachable", key)
		}
	}
}

// TestSnapshotAcrossTables begins one snapshot of two tables; a change to
// the second table after the first was captured is still not seen.
func TestSnapshotAcrossTables(t *testing.T) {
	a := newFixture(t, fifo, fifo, 10, 0, ratelimit.MinSize(1))
	b := newFixture(t, fifo, fifo, 10, 0, ratelimit.MinSize(1))
	a.insert(1, 1)
	b.insert(2, 1)
	snaps, err := BeginSnapshots(a.table, b.table)
	if err != nil {
		t.Fatal(err)
	}
	snaps[0].Capture()
	b.insert(3, 1)
	b.sample(1)
	a.insert(4, 1)
	snaps[1].Capture()
	for i, want := range [][]uint64{{1}, {2}} {
		var got []uint64
		for it := range snaps[i].Items() {
			got = append(got, it.Key)
			if it.TimesSampled != 0 {
				t.Fatalf("table %d key %d: times_sampled %d in the snapshot", i, it.Key, it.TimesSampled)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("table %d: snapshot keys %v, want %v", i, got, want)
		}
	}
}

// restoreFrom loads the items of sn into a fresh table like f's, with the
// snapshot's counters, as a checkpoint restore does.
func restoreFrom(t *testing.T, sn *Snapshot, into *fixture) RestoreReport {
	t.Helper()
	if err := into.table.BeginRestore(); err != nil {
		t.Fatal(err)
	}
	for it := range sn.Items() {
		cp := *it
		for _, c := range cp.Chunks {
			c.Ref()
		}
		if err := into.table.RestoreItem(cp); err != nil {
			t.Fatal(err)
		}
	}
	return into.table.FinishRestore(RestoreCounters{
		Inserts: sn.Info.Inserts, Samples: sn.Info.Samples,
		NumDeletedEpisodes: sn.Info.NumDeletedEpisodes, NumUniqueSamples: sn.Info.NumUniqueSamples,
	})
}

func TestRestoreKeepsOrderAndCounters(t *testing.T) {
	for _, spec := range []selector.Spec{fifo, lifo, {Kind: selector.KindMinHeap}} {
		t.Run(spec.Kind.String(), func(t *testing.T) {
			f := newFixture(t, spec, fifo, 20, 2, ratelimit.MinSize(1))
			for k := uint64(1); k <= 30; k++ {
				f.insert(k, float64(k%3)) // heap ties broken by insertion order
			}
			f.sample(5)
			// A unique priority: heaps break ties by the last insert or
			// update, and a restore re-inserts in insertion order.
			f.table.MutatePriorities([]KeyPriority{{20, 0.5}}, []uint64{25})
			snaps, err := BeginSnapshots(f.table)
			if err != nil {
				t.Fatal(err)
			}
			snaps[0].Capture()

			g := newFixture(t, spec, fifo, 20, 2, ratelimit.MinSize(1))
			g.store = f.store
			rep := restoreFrom(t, snaps[0], g)
			if rep.Evicted != 0 || rep.OverSampled != 0 || rep.Loaded != int64(snaps[0].Len()) {
				t.Fatalf("report %+v", rep)
			}
			fi, gi := f.table.Info(), g.table.Info()
			if fi != gi {
				t.Fatalf("restored info %+v, want %+v", gi, fi)
			}
			// Both tables now answer the same samples in the same order.
			for f.table.Len() > 0 {
				a, b := f.sample(1)[0], g.sample(1)[0]
				if a.Item.Key != b.Item.Key || a.Item.TimesSampled != b.Item.TimesSampled || a.Item.InsertedAt != b.Item.InsertedAt || a.Item.Priority != b.Item.Priority {
					t.Fatalf("original sampled %+v, restored %+v", a.Item, b.Item)
				}
			}
			if g.table.Len() != 0 {
				t.Fatal("restored table holds more items")
			}
			if fs, gs := f.stats.Snapshot(), g.stats.Snapshot(); gs.Items != fs.Items || gs.PrioritySum != fs.PrioritySum {
				t.Fatalf("stats extension after restore: %+v, original %+v", gs, fs)
			}
		})
	}
}

// TestRestoreLimiterCannotDeadlock: a checkpoint whose counters say the
// table holds ten unsampled items when it holds none. Taken as they are,
// a Queue(10) limiter would refuse every insert (the diff is at max_diff)
// while no sample can be served (the table is empty): Reverb issue #103's
// hang. FinishRestore counts the items actually loaded instead.
func TestRestoreLimiterCannotDeadlock(t *testing.T) {
	verbatim := ratelimit.New(ratelimit.Queue(10))
	verbatim.Restore(10, 0, 0)
	if verbatim.CanInsert() {
		t.Fatal("the verbatim counters should block inserts for this test to mean anything")
	}

	f := newFixture(t, fifo, fifo, 10, 1, ratelimit.Queue(10))
	if err := f.table.BeginRestore(); err != nil {
		t.Fatal(err)
	}
	rep := f.table.FinishRestore(RestoreCounters{Inserts: 10})
	if rep.Inserts != 10 || rep.Deletes != 10 {
		t.Fatalf("report %+v, want inserts 10 and deletes 10", rep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.table.Insert(ctx, f.item(1, 1, 1)); err != nil {
		t.Fatalf("insert after restore: %v", err)
	}
	if got := f.sample(1); got[0].Item.Key != 1 {
		t.Fatalf("sampled %v", keys(got))
	}
}

func TestRestoreAppliesConfig(t *testing.T) {
	f := newFixture(t, fifo, fifo, 100, 0, ratelimit.MinSize(1))
	for k := uint64(1); k <= 10; k++ {
		f.insert(k, 1)
	}
	f.sample(4) // the FIFO sampler picks key 1 four times
	snaps, _ := BeginSnapshots(f.table)
	snaps[0].Capture()

	// A smaller max_size and a max_times_sampled of 1.
	g := newFixture(t, fifo, fifo, 3, 1, ratelimit.MinSize(1))
	g.store = f.store
	rep := restoreFrom(t, snaps[0], g)
	if rep.Loaded != 10 || rep.OverSampled != 1 || rep.Evicted != 6 {
		t.Fatalf("report %+v, want 10 loaded, 1 over-sampled, 6 evicted", rep)
	}
	info := g.table.Info()
	if info.Size != 3 || info.Inserts-info.Deletes != 3 || info.Inserts != 10 || info.Samples != 4 {
		t.Fatalf("info %+v", info)
	}
	if got := keys(g.sample(3)); !equalKeys(got, []uint64{8, 9, 10}) {
		t.Fatalf("kept %v, want the newest three", got)
	}
}

func TestRestoreRefusals(t *testing.T) {
	f := newFixture(t, uniform, fifo, 10, 0, ratelimit.MinSize(1))
	if err := f.table.RestoreItem(f.item(1, 1, 1)); err == nil {
		t.Fatal("RestoreItem without BeginRestore accepted")
	}
	f.insert(1, 1)
	if err := f.table.BeginRestore(); err == nil {
		t.Fatal("restore into a used table accepted")
	}

	p := newFixture(t, selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 1}, fifo, 10, 0, ratelimit.MinSize(1))
	if err := p.table.BeginRestore(); err != nil {
		t.Fatal(err)
	}
	if err := p.table.RestoreItem(p.item(1, -1, 1)); !errors.Is(err, ErrInvalidPriority) {
		t.Fatalf("negative priority into a prioritized table: %v", err)
	}
	if err := p.table.RestoreItem(p.item(2, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := p.table.RestoreItem(p.item(2, 1, 1)); !errors.Is(err, ErrInvalidItem) {
		t.Fatalf("duplicate key: %v", err)
	}
	if _, err := BeginSnapshots(p.table); err == nil {
		t.Fatal("snapshot during restore accepted")
	}
}

// TestRestoreQueueSmaller: a Queue(100) checkpoint holding 50 unsampled
// items restored into a Queue(10) table. 40 are evicted, and the diff (50)
// is brought down to max_diff (10); left at 50, after the 10 items were
// sampled, the queue would admit an insert only while empty, one item at
// a time for good (found by review).
func TestRestoreQueueSmaller(t *testing.T) {
	f := newFixture(t, fifo, fifo, 100, 1, ratelimit.Queue(100))
	for k := uint64(1); k <= 50; k++ {
		f.insert(k, 1)
	}
	snaps, _ := BeginSnapshots(f.table)
	snaps[0].Capture()
	g := newFixture(t, fifo, fifo, 10, 1, ratelimit.Queue(10))
	g.store = f.store
	rep := restoreFrom(t, snaps[0], g)
	snaps[0].Release()
	if rep.Evicted != 40 || rep.SamplesAdded != 40 {
		t.Fatalf("report %+v, want 40 evicted and 40 samples added", rep)
	}
	g.sample(10)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for k := uint64(101); k <= 110; k++ {
		if err := g.table.Insert(ctx, g.item(k, 1, 1)); err != nil {
			t.Fatalf("insert %d of 10 into the emptied queue: %v", k-100, err)
		}
	}
}

// TestStatsPrioritySum: the sum of the priorities held survives what a
// running sum does not: an infinite priority held and then deleted (a
// heap table takes them), and a large priority that swallowed a small one
// when added.
func TestStatsPrioritySum(t *testing.T) {
	s := NewStats()
	inf := &Item{Priority: math.Inf(1)}
	one := &Item{Priority: 1}
	s.OnInsert(inf)
	s.OnInsert(one)
	if got := s.Snapshot().PrioritySum; !math.IsInf(got, 1) {
		t.Fatalf("sum with +Inf held: %v", got)
	}
	s.OnDelete(inf)
	if got := s.Snapshot().MeanPriority(); got != 1 {
		t.Fatalf("mean after the +Inf item left: %v, want 1", got)
	}
	big := &Item{Priority: 1e20}
	s.OnInsert(big)
	s.OnDelete(big)
	if got := s.Snapshot().PrioritySum; got != 1 {
		t.Fatalf("sum after 1e20 came and went: %v, want 1", got)
	}
}

// TestRestoreKeepsDiffWithoutRemovals: a table can be over max_diff in the
// ordinary way (inserts below min_size_to_sample are not checked); a
// restore that removes nothing leaves its counters as they were, and does
// not write off the samples the limiter still asks for.
func TestRestoreKeepsDiffWithoutRemovals(t *testing.T) {
	f := newFixture(t, fifo, fifo, 10, 1, ratelimit.Queue(10))
	if err := f.table.BeginRestore(); err != nil {
		t.Fatal(err)
	}
	for k := uint64(1); k <= 5; k++ {
		if err := f.table.RestoreItem(f.item(k, 1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	rep := f.table.FinishRestore(RestoreCounters{Inserts: 20})
	if rep.SamplesAdded != 0 || rep.Samples != 0 {
		t.Fatalf("report %+v: samples added without a removal", rep)
	}
}

// TestStatsPrioritySumOverflow: a finite sum that overflows stays
// infinite, as a plain running sum would, and does not turn NaN.
func TestStatsPrioritySumOverflow(t *testing.T) {
	s := NewStats()
	a, b := &Item{Priority: 1e308}, &Item{Priority: 1e308}
	s.OnInsert(a)
	s.OnInsert(b)
	s.OnDelete(a)
	if got := s.Snapshot().PrioritySum; math.IsNaN(got) {
		t.Fatalf("sum after an overflow: %v", got)
	}
}
