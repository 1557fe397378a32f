package chunkstore

import (
	"math/rand/v2"
	"testing"
)

// TestIndexMatchesMap runs random sets and deletes against the index and a
// Go map, with keys from a small range so that runs collide and wrap.
func TestIndexMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ix, m := newIndex(), map[uint64]*Chunk{}
	chunks := make([]*Chunk, 8)
	for i := range chunks {
		chunks[i] = &Chunk{}
	}
	for op := range 200000 {
		key := rng.Uint64N(300)
		c := chunks[rng.IntN(len(chunks))]
		switch rng.IntN(3) {
		case 0:
			ix.set(key, c)
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
