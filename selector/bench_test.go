package selector_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// BenchmarkSelector measures a steady state at several sizes, as a full
// table that evicts its oldest item sees it: slots 0..n-1 are inserted in
// order, then each op deletes the oldest slot, inserts a new item into the
// slot just freed (with a new priority) and samples once.
func BenchmarkSelector(b *testing.B) {
	// Priorities in [0, 1), looked up by a counter so that prefill stays
	// cheap.
	rng := rand.New(rand.NewPCG(1, 2))
	var prios [4096]float64
	for i := range prios {
		prios[i] = rng.Float64()
	}
	prio := func(i uint64) float64 { return prios[i%uint64(len(prios))] }

	for _, k := range builtins {
		for _, n := range []int{1e3, 1e5, 1e6, 1e7} {
			b.Run(fmt.Sprintf("%s/n=%d", k.name, n), func(b *testing.B) {
				s := mustNew(b, k.spec, 1)
				for slot := range selector.Slot(n) {
					mustInsert(b, s, slot, prio(uint64(slot)))
				}
				b.ReportAllocs()
				oldest, inserted := selector.Slot(0), uint64(n)
				for b.Loop() {
					if err := s.Delete(oldest); err != nil {
						b.Fatal(err)
					}
					if err := s.Insert(oldest, prio(inserted)); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Sample(); err != nil {
						b.Fatal(err)
					}
					inserted++
					if oldest++; oldest == selector.Slot(n) {
						oldest = 0
					}
				}
			})
		}
	}
}
