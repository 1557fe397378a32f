package chunkstore

import (
	"sync"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
)

func chunk(key uint64) *reverbpb.ChunkData {
	return &reverbpb.ChunkData{ChunkKey: key, SequenceRange: &reverbpb.SequenceRange{EpisodeId: key % 3}}
}

func TestRefCounting(t *testing.T) { forEachMode(t, testRefCounting) }

func testRefCounting(t *testing.T, s *Store) {
	a := s.Insert(chunk(1))
	if s.Len() != 1 || s.Bytes() != int64(a.Size()) || a.Refs() != 1 {
		t.Fatalf("after insert: len %d bytes %d refs %d", s.Len(), s.Bytes(), a.Refs())
	}
	// The same key again shares the live chunk; the first copy wins.
	second := chunk(1)
	second.DeltaEncoded = true
	b := s.Insert(second)
	if b != a || a.Refs() != 2 || mustData(t, a).GetDeltaEncoded() {
		t.Fatalf("same key: got a new chunk or the second copy")
	}
	if g := s.Get(1); g != a || a.Refs() != 3 {
		t.Fatalf("Get: %v refs %d", g, a.Refs())
	}
	a.Unref()
	a.Unref()
	if s.Len() != 1 {
		t.Fatal("released while referenced")
	}
	a.Unref()
	if s.Len() != 0 || s.Bytes() != 0 || s.Get(1) != nil {
		t.Fatalf("after the last Unref: len %d bytes %d", s.Len(), s.Bytes())
	}
	// A released key can be inserted anew.
	c := s.Insert(chunk(1))
	if c == a || c.Refs() != 1 || s.Len() != 1 {
		t.Fatal("re-insert after release")
	}
	c.Unref()
}

func TestUnrefOfReleasedChunkPanics(t *testing.T) {
	s := New()
	c := s.Insert(chunk(5))
	c.Unref()
	defer func() {
		if recover() == nil {
			t.Fatal("double Unref did not panic")
		}
	}()
	c.Unref()
}

// TestConcurrentSharing races inserts of the same keys against releases;
// run with -race. Whatever the interleaving, every reference is accounted
// for and the store ends empty.
func TestConcurrentSharing(t *testing.T) { forEachMode(t, testConcurrentSharing) }

func testConcurrentSharing(t *testing.T, s *Store) {
	var wg sync.WaitGroup
	// Grow the shards' indexes while the others prefetch from them (which
	// takes no lock: the race detector checks it reads nothing unsafely).
	wg.Add(1)
	go func() {
		defer wg.Done()
		var held []*Chunk
		for i := 0; i < 20000; i++ {
			held = append(held, s.Insert(chunk(uint64(1000+i))))
		}
		for _, c := range held {
			c.Unref()
		}
	}()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				key := uint64(i % 17)
				s.Prefetch(key)
				s.Prefetch(uint64(1000 + i))
				c := s.Insert(chunk(key))
				c.PrefetchIndex()
				if c.Key() != key {
					t.Errorf("key %d gave chunk %d", key, c.Key())
					return
				}
				if i%3 == 0 {
					if d := s.Get(key); d != nil {
						d.Unref()
					}
				}
				c.Unref()
			}
		}(g)
	}
	wg.Wait()
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("store holds %d chunks (%d bytes) after every reference was dropped", s.Len(), s.Bytes())
	}
}

// TestPrefetchEncoded: asking for a chunk's bytes ahead changes nothing,
// for chunks of every size (a few bytes, unaligned, past the bound) and in
// every mode (the tiered ones do nothing, since their data may be on disk).
func TestPrefetchEncoded(t *testing.T) {
	forEachMode(t, func(t *testing.T, s *Store) {
		for i, n := range []int{0, 1, 63, 65, 400, prefetchEncodedMax + 100} {
			key := uint64(i + 1)
			c := s.Insert(payloadChunk(key, n))
			want, err := c.Encoded()
			if err != nil {
				t.Fatal(err)
			}
			want = append([]byte(nil), want...)
			c.PrefetchEncoded()
			got, err := c.Encoded()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("chunk of %d bytes changed by PrefetchEncoded", n)
			}
			c.Unref()
		}
	})
}

// TestList: a chunk's list of itself holds it, and appending to it copies
// rather than writing into the chunk.
func TestList(t *testing.T) { forEachMode(t, testList) }

func testList(t *testing.T, s *Store) {
	a, b := s.Insert(chunk(1)), s.Insert(chunk(2))
	defer a.Unref()
	defer b.Unref()
	l := a.List()
	if len(l) != 1 || l[0] != a {
		t.Fatalf("List = %v, want [a]", l)
	}
	if n := testing.AllocsPerRun(100, func() { l = a.List() }); n != 0 {
		t.Errorf("List allocates %v times", n)
	}
	two := append(a.List(), b)
	if len(two) != 2 || two[0] != a || two[1] != b || a.List()[0] != a || len(a.List()) != 1 {
		t.Fatalf("append to List: %v, and List now %v", two, a.List())
	}
}
