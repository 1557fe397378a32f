package chunkstore

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// TestIndexMatchesMap runs random sets and deletes against the index and a
// Go map, with keys from a small range so that runs collide and wrap.
func TestIndexMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ix, m := newIndex(&slots{}), map[uint64]*Chunk{}
	chunks := make([]*Chunk, 8)
	for i := range chunks {
		chunks[i] = &Chunk{}
	}
	for op := range 200000 {
		key := rng.Uint64N(300)
		c := chunks[rng.IntN(len(chunks))]
		switch rng.IntN(3) {
		case 0:
			ix.set(key, c, ix.get(key) != nil)
			m[key] = c
		case 1:
			ix.deleteChunk(key, c)
			if m[key] == c {
				delete(m, key)
			}
		}
		if got := ix.get(key); got != m[key] {
			t.Fatalf("op %d: get(%d) = %p, map has %p", op, key, got, m[key])
		}
		if ix.m.Len() != len(m) {
			t.Fatalf("op %d: %d entries, map has %d", op, ix.m.Len(), len(m))
		}
	}
	for k, c := range m {
		if ix.get(k) != c {
			t.Fatalf("get(%d) differs at the end", k)
		}
	}
}

// TestIndexSlotsReused: the slots of deleted keys are handed out again, so
// the slots in use never exceed the keys held at once, and a freed slot
// holds nothing for the collector to keep.
func TestIndexSlotsReused(t *testing.T) {
	sl := &slots{}
	ix := newIndex(sl)
	live := map[uint64]*Chunk{}
	rng := rand.New(rand.NewPCG(3, 4))
	const maxLive = 3000 // spans three pages of slots
	next := uint64(0)
	for op := range 100000 {
		if len(live) < maxLive && (len(live) == 0 || rng.IntN(2) == 0) {
			next++
			c := &Chunk{key: next}
			ix.set(next, c, false)
			live[next] = c
		} else {
			for k, c := range live { // a random key: map order
				ix.deleteChunk(k, c)
				delete(live, k)
				break
			}
		}
		if sl.n > maxLive {
			t.Fatalf("op %d: %d slots handed out for at most %d keys", op, sl.n, maxLive)
		}
	}
	if got := int(sl.n) - len(sl.free); got != len(live) {
		t.Fatalf("%d slots in use, %d keys held", got, len(live))
	}
	for _, s := range sl.free {
		if sl.get(s) != nil {
			t.Fatalf("free slot %d still holds chunk %d", s, sl.get(s).key)
		}
	}
	for k, c := range live {
		if ix.get(k) != c {
			t.Fatalf("get(%d) = %p, want %p", k, ix.get(k), c)
		}
	}
}

// TestIndexSharedSlotsConcurrent: shards' indexes, each under its own
// lock as in a Store, share one slots; run with -race.
func TestIndexSharedSlotsConcurrent(t *testing.T) {
	sl := &slots{}
	const shards, ops = 4, 20000
	var wg sync.WaitGroup
	for g := range shards {
		wg.Go(func() {
			var mu sync.Mutex
			ix := newIndex(sl)
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			live := map[uint64]*Chunk{}
			for range ops {
				key := uint64(g)<<32 | rng.Uint64N(2000)
				mu.Lock()
				if c, ok := live[key]; ok {
					if ix.get(key) != c {
						t.Errorf("shard %d: get(%d) is not the chunk set", g, key)
					}
					ix.deleteChunk(key, c)
					delete(live, key)
				} else {
					c := &Chunk{key: key}
					ix.set(key, c, false)
					live[key] = c
				}
				mu.Unlock()
			}
			mu.Lock()
			for k, c := range live {
				if ix.get(k) != c {
					t.Errorf("shard %d: get(%d) differs at the end", g, k)
				}
			}
			mu.Unlock()
		})
	}
	wg.Wait()
}
