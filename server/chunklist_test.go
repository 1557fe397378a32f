package server

import (
	"fmt"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
)

// addChunk is chunkList.add on a list cs.
func addChunk(cs []*chunkstore.Chunk, c *chunkstore.Chunk) []*chunkstore.Chunk {
	l := chunkList{cs: cs}
	l.add(c)
	return l.cs
}

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

// TestChunkListMany: past smallChunkList chunks the list keeps first
// appearances in order, without repeats, through its map.
func TestChunkListMany(t *testing.T) {
	s := chunkstore.New()
	var all []*chunkstore.Chunk
	for k := range uint64(100) {
		all = append(all, s.Insert(&reverbpb.ChunkData{ChunkKey: k + 1}))
	}
	var l chunkList
	for round := range 3 {
		for i, c := range all {
			if (i+round)%2 == 0 || round == 2 {
				l.add(c)
			}
		}
	}
	if len(l.cs) != len(all) {
		t.Fatalf("%d chunks listed, want %d", len(l.cs), len(all))
	}
	for i, c := range l.cs {
		// Round 0 added the even ones in order, round 1 the odd ones.
		want := 2 * i
		if i >= 50 {
			want = 2*(i-50) + 1
		}
		if c != all[want] {
			t.Fatalf("chunk %d is %d, want %d", i, c.Key(), all[want].Key())
		}
	}
}

// BenchmarkCheckTrajectoryManyChunks: one item whose slices name n
// distinct chunks. Time per op should grow with n, not n².
func BenchmarkCheckTrajectoryManyChunks(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := chunkstore.New()
			chunks := make(map[uint64]*chunkstore.Chunk, n)
			col := &reverbpb.FlatTrajectory_Column{}
			for k := range uint64(n) {
				chunks[k+1] = s.Insert(fuzzSeedChunk(k+1, 1))
				col.ChunkSlices = append(col.ChunkSlices, &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: k + 1, Length: 1})
			}
			traj := table.EncodeTrajectory(&reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{col}})
			b.ResetTimer()
			for b.Loop() {
				if cs, err := checkTrajectory(traj, chunks); err != nil || len(cs) != n {
					b.Fatalf("%d chunks, %v", len(cs), err)
				}
			}
		})
	}
}
