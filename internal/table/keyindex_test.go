package table

import (
	"math/rand/v2"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// TestKeyIndexAgainstMap runs random puts, deletes and gets against a Go
// map, with small key ranges (long probe runs, wrap-around) and full-range
// keys, checking every lookup and the whole contents periodically.
func TestKeyIndexAgainstMap(t *testing.T) {
	for _, keyRange := range []uint64{50, 5000, 0} {
		rng := rand.New(rand.NewPCG(7, keyRange))
		ix := newKeyIndex(rng.Uint64())
		ref := map[uint64]selector.Slot{}
		for step := 0; step < 200_000; step++ {
			key := rng.Uint64()
			if keyRange > 0 {
				key %= keyRange
			}
			switch op := rng.IntN(10); {
			case op < 5:
				if _, ok := ref[key]; !ok {
					slot := selector.Slot(rng.Uint32N(1 << 30))
					ix.put(key, slot)
					ref[key] = slot
				}
			case op < 9:
				ix.delete(key)
				delete(ref, key)
			default:
				ix.reset()
				clear(ref)
			}
			probe := rng.Uint64()
			if keyRange > 0 {
				probe %= keyRange
			}
			got, ok := ix.get(probe)
			want, wantOK := ref[probe]
			if ok != wantOK || got != want {
				t.Fatalf("range %d step %d: get(%d) = %d,%v, want %d,%v", keyRange, step, probe, got, ok, want, wantOK)
			}
			if ix.len() != len(ref) {
				t.Fatalf("range %d step %d: len %d, want %d", keyRange, step, ix.len(), len(ref))
			}
			if step%10_000 == 0 {
				seen := 0
				ix.all(func(k uint64, s selector.Slot) {
					seen++
					if ref[k] != s {
						t.Fatalf("all: key %d slot %d, want %d", k, s, ref[k])
					}
				})
				if seen != len(ref) {
					t.Fatalf("all visited %d, want %d", seen, len(ref))
				}
			}
		}
	}
}

func BenchmarkKeyIndexChurn(b *testing.B) {
	for _, n := range []int{1000, 1_000_000, 10_000_000} {
		b.Run(sizeName(n), func(b *testing.B) {
			ix := newKeyIndex(1)
			for k := 0; k < n; k++ {
				ix.put(uint64(k), selector.Slot(k))
			}
			next := uint64(n)
			for b.Loop() {
				ix.delete(next - uint64(n))
				ix.put(next, 1)
				next++
			}
		})
	}
}
