package selector_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSelector measures a steady state at several sizes: each op
// inserts a new key, deletes the oldest one and samples once.
func BenchmarkSelector(b *testing.B) {
	// Priorities in [0, 1), looked up by key so that prefill stays cheap.
	rng := rand.New(rand.NewPCG(1, 2))
	var prios [4096]float64
	for i := range prios {
		prios[i] = rng.Float64()
	}
	prio := func(key uint64) float64 { return prios[key%uint64(len(prios))] }

	for _, k := range builtins {
		for _, n := range []int{1e3, 1e5, 1e6} {
			b.Run(fmt.Sprintf("%s/n=%d", k.name, n), func(b *testing.B) {
				s := mustNew(b, k.spec, 1)
				for key := range uint64(n) {
					mustInsert(b, s, key, prio(key))
				}
				b.ReportAllocs()
				oldest, next := uint64(0), uint64(n)
				for b.Loop() {
					if err := s.Insert(next, prio(next)); err != nil {
						b.Fatal(err)
					}
					if err := s.Delete(oldest); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Sample(); err != nil {
						b.Fatal(err)
					}
					oldest++
					next++
				}
			})
		}
	}
}
