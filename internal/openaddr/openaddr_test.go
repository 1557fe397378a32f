package openaddr

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestMatchesGoMap runs random sets, deletes, conditional deletes and
// resets against a Map and a Go map, with keys from small ranges so that
// runs collide, wrap around the end of the entries and are shifted back by
// deletes.
func TestMatchesGoMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, keyRange := range []uint64{8, 300, 1 << 20} {
		m, ref := WithSeed[uint32](rng.Uint64()), map[uint64]uint32{}
		for op := range 200_000 {
			key := rng.Uint64N(keyRange)
			v := uint32(1 + rng.IntN(8))
			switch rng.IntN(7) {
			case 0, 1, 2:
				m.Set(key, v)
				ref[key] = v
			case 3, 4:
				m.Delete(key)
				delete(ref, key)
			case 5:
				got, removed := m.DeleteFunc(key, func(x uint32) bool { return x == v })
				want, had := ref[key]
				if removed != (had && want == v) || removed && got != v {
					t.Fatalf("op %d: DeleteFunc(%d, == %d) = %d, %v; the map held %d, %v", op, key, v, got, removed, want, had)
				}
				if removed {
					delete(ref, key)
				}
			case 6:
				if rng.IntN(1000) == 0 {
					m.Reset()
					clear(ref)
				}
			}
			probe := rng.Uint64N(keyRange)
			m.Prefetch(rng.Uint64N(keyRange)) // changes nothing
			m.PrefetchDelete(rng.Uint64N(keyRange))
			got, ok := m.Get(probe)
			want, wantOK := ref[probe]
			if got != want || ok != wantOK {
				t.Fatalf("range %d op %d: Get(%d) = %d, %v; want %d, %v", keyRange, op, probe, got, ok, want, wantOK)
			}
			if m.Len() != len(ref) {
				t.Fatalf("range %d op %d: Len %d, want %d", keyRange, op, m.Len(), len(ref))
			}
		}
		seen := 0
		m.All(func(k uint64, v uint32) {
			seen++
			if ref[k] != v {
				t.Fatalf("range %d: All yields %d=%d, want %d", keyRange, k, v, ref[k])
			}
		})
		if seen != len(ref) {
			t.Fatalf("range %d: All yields %d keys, want %d", keyRange, seen, len(ref))
		}
	}
}

func TestPrefetchEmpty(t *testing.T) {
	var m Map[uint32]
	m.Prefetch(42)
	m.PrefetchDelete(42)
	h := m.Hint()
	h.Prefetch(42)
	m.Set(42, 1)
	m.Prefetch(42)
	m.PrefetchDelete(42)
	if v, ok := m.Get(42); !ok || v != 1 || m.Len() != 1 {
		t.Errorf("after Prefetch: Get(42) = %d, %v, Len %d; want 1, true, 1", v, ok, m.Len())
	}
}

// TestHint checks that a hint points where the map's lookups start, as
// the map grows, so that prefetching through it fetches the right line.
func TestHint(t *testing.T) {
	m := New[uint32]()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 1; i <= 5000; i++ {
		m.Set(rng.Uint64(), uint32(i))
		h := m.Hint()
		for j := 0; j < 4; j++ {
			key := rng.Uint64()
			want := uintptr(unsafe.Pointer(&m.entries[m.home(key)]))
			if got := h.addr(key); got != want {
				t.Fatalf("after %d sets: hint address of key %d is %#x, want %#x", i, key, got, want)
			}
			h.Prefetch(key)
		}
	}
}

func TestSetZeroPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Set of the zero value did not panic")
		}
	}()
	var m Map[*int]
	m.Set(1, nil)
}
