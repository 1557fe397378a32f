package table

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/ratelimit"
	"github.com/reverie-rl/reverie/selector"
)

var benchSizes = flag.String("table.sizes", "1000,100000,10000000", "table sizes for BenchmarkTable")

// BenchmarkTable measures a full table of each selector kind as the
// sampler (the remover is FIFO, or the same kind with -table.remover same): Insert of a new key (which also evicts one item),
// Sample of one item, and Sample of a 64-item batch. Items share one chunk
// so that 1e7 of them fit in memory; the per-item work is the same.
//
//	go test -run XXX -bench BenchmarkTable -benchtime 1000000x ./internal/table -args -table.sizes 1000,100000,10000000
func BenchmarkTable(b *testing.B) {
	var sizes []int
	for _, s := range strings.Split(*benchSizes, ",") {
		var n int
		fmt.Sscan(s, &n)
		sizes = append(sizes, n)
	}
	kinds := []selector.Spec{
		{Kind: selector.KindFIFO}, {Kind: selector.KindLIFO}, {Kind: selector.KindUniform},
		{Kind: selector.KindPrioritized, PriorityExponent: 0.8}, {Kind: selector.KindMinHeap}, {Kind: selector.KindMaxHeap},
	}
	store := chunkstore.New()
	c := store.Insert(&reverbpb.ChunkData{ChunkKey: 1, SequenceRange: &reverbpb.SequenceRange{EpisodeId: 1}})
	traj := &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
		ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: 1, Length: 1}},
	}}}
	for _, spec := range kinds {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%v/n=%s", spec.Kind, sizeName(n)), func(b *testing.B) {
				benchFullTable(b, spec, *benchRemover, n, store, c, traj)
			})
		}
	}
}

var benchRemover = flag.String("table.remover", "fifo", "remover of BenchmarkTable's tables: fifo, or same (the sampler's kind)")

// benchFullTable fills a table of n items, then runs the insert, sample and
// 64-sample batch sub-benchmarks on it. The parent benchmark runs once, so
// the table is filled once.
func benchFullTable(b *testing.B, spec selector.Spec, remover string, n int, store *chunkstore.Store, c *chunkstore.Chunk, traj *reverbpb.FlatTrajectory) {
	enc := EncodeTrajectory(traj)
	rspec := selector.Spec{Kind: selector.KindFIFO}
	if remover == "same" {
		rspec = spec
	}
	s, _ := selector.New(spec, 1)
	r, _ := selector.New(rspec, 2)
	t, err := New(Config{Name: "bench", Sampler: s, Remover: r, MaxSize: int64(n), RateLimiter: ratelimit.MinSize(1)})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Reset()
	ctx := context.Background()
	key := uint64(0)
	insert := func() {
		key++
		c.Ref()
		// Priorities cycle so that heaps and the sum tree do real work.
		it := Item{Key: key, Priority: float64(key%1000) + 1, Trajectory: enc, Chunks: []*chunkstore.Chunk{c}}
		if err := t.Insert(ctx, it); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		insert()
	}
	b.Run("insert", func(b *testing.B) {
		for b.Loop() {
			insert()
		}
	})
	b.Run("sample", func(b *testing.B) {
		for b.Loop() {
			if _, err := t.Sample(ctx, 1, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sample64", func(b *testing.B) {
		for b.Loop() {
			out, err := t.Sample(ctx, 64, 0)
			if err != nil || len(out) != 64 {
				b.Fatal(err, len(out))
			}
		}
	})
}

func sizeName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
