package server

import (
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
)

// TestAddChunk: an item's first chunk costs no allocation (its list is the
// chunk's own), repeats are not added, and a second chunk copies the list
// rather than writing into the first chunk.
func TestAddChunk(t *testing.T) {
	s := chunkstore.New()
	a := s.Insert(&reverbpb.ChunkData{ChunkKey: 1})
	b := s.Insert(&reverbpb.ChunkData{ChunkKey: 2})
	var cs []*chunkstore.Chunk
	if n := testing.AllocsPerRun(100, func() { cs = addChunk(addChunk(nil, a), a) }); n != 0 {
		t.Errorf("a list of one chunk allocates %v times", n)
	}
	if len(cs) != 1 || &cs[0] != &a.List()[0] {
		t.Fatalf("addChunk(nil, a) = %v, not a's own list", cs)
	}
	cs = addChunk(addChunk(cs, b), a)
	if len(cs) != 2 || cs[0] != a || cs[1] != b {
		t.Fatalf("[a] + b + a = %v, want [a b]", cs)
	}
	if l := a.List(); len(l) != 1 || l[0] != a {
		t.Fatalf("a.List() = %v after adding to it", l)
	}
}
