package chunkstore

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
)

// ownedChunk inserts a chunk with key and n bytes of padding in a buffer
// from s.AllocChunk, as the insert stream does.
func ownedChunk(t *testing.T, s *Store, key uint64, n int) (*Chunk, []byte) {
	t.Helper()
	c, buf, err := insertOwned(s, key, n)
	if err != nil {
		t.Fatal(err)
	}
	return c, buf
}

func insertOwned(s *Store, key uint64, n int) (*Chunk, []byte, error) {
	d := chunk(key)
	d.Data = &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{TensorContent: make([]byte, n)}}}
	enc, err := proto.Marshal(d)
	if err != nil {
		return nil, nil, err
	}
	buf := s.AllocChunk(len(enc))
	if buf == nil {
		return nil, nil, fmt.Errorf("AllocChunk(%d) = nil", len(enc))
	}
	copy(buf, enc)
	return s.InsertOwned(MetaOf(d), buf), buf, nil
}

// liveChunks inserts n chunks of size bytes, keys from first on, which the
// store holds until the test ends: live bytes, so that its free list may
// keep released buffers.
func liveChunks(t *testing.T, s *Store, first uint64, n, size int) {
	t.Helper()
	var keep []*Chunk
	for k := range n {
		c, _ := ownedChunk(t, s, first+uint64(k), size)
		keep = append(keep, c)
	}
	t.Cleanup(func() {
		for _, c := range keep {
			c.Unref()
		}
	})
}

func sameBuf(a, b []byte) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

func TestAllocChunkSizes(t *testing.T) {
	s := New()
	if b := s.AllocChunk(recycleMinBytes - 1); b != nil {
		t.Fatalf("AllocChunk below the minimum returned %d bytes", cap(b))
	}
	for _, c := range []struct{ n, cap int }{
		{32_768, 32_768}, {32_769, 40_960}, {40_001, 40_960}, {400_100, 401_408}, {1_000_000, 1_015_808},
	} {
		if b := s.AllocChunk(c.n); len(b) != c.n || cap(b) != c.cap {
			t.Errorf("AllocChunk(%d): len %d cap %d, want cap %d", c.n, len(b), cap(b), c.cap)
		}
	}
	ts, err := NewTiered(Options{Mode: Hybrid, MemoryLimit: 1 << 20, Spill: NewMemSpill()})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	if b := ts.AllocChunk(100_000); b != nil {
		t.Fatal("a tiered store handed out a buffer for reuse")
	}
}

// TestReleasedBufferIsReused: the buffer of a released chunk goes to the
// next chunk of its size class, and not before every pin is dropped.
func TestReleasedBufferIsReused(t *testing.T) {
	for _, size := range []int{40_000, 400_000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testReleasedBufferIsReused(t, size) })
	}
}

func testReleasedBufferIsReused(t *testing.T, size int) {
	s := New()
	liveChunks(t, s, 100, 16, size)
	a, abuf := ownedChunk(t, s, 1, size)
	if !a.NeedsPin() {
		t.Fatal("a chunk in a reused buffer needs no pin")
	}
	a.Pin() // a sampler reads it
	a.Unref()
	if s.Len() != 16 || s.Get(1) != nil {
		t.Fatal("a pinned chunk is still in the store after its last reference")
	}
	if st := s.FreeStats(); st.Kept != 0 {
		t.Fatalf("a pinned chunk's buffer went to the free list: %+v", st)
	}
	if enc, _ := a.Encoded(); !sameBuf(enc, abuf) || enc[0] == 0xa5 && PoisonRecycled {
		t.Fatal("a pinned chunk's bytes changed")
	}
	a.Unpin()
	if st := s.FreeStats(); st.Kept != 1 || st.Bytes != int64(cap(abuf)) {
		t.Fatalf("after Unpin: %+v, want the buffer kept", st)
	}
	b, bbuf := ownedChunk(t, s, 2, size)
	if !sameBuf(abuf, bbuf) {
		t.Fatal("the next chunk of the same size got a new buffer")
	}
	if st := s.FreeStats(); st.Reused != 1 || st.Bytes != 0 {
		t.Fatalf("after reuse: %+v", st)
	}
	if d := mustData(t, b); d.GetChunkKey() != 2 {
		t.Fatalf("reused buffer holds chunk %d", d.GetChunkKey())
	}
	// A chunk of another class gets a buffer of its own.
	s.Get(2).Unref()
	b.Unref()
	_, cbuf := ownedChunk(t, s, 3, 2*size)
	if sameBuf(cbuf, bbuf) {
		t.Fatal("a chunk twice as large got the buffer")
	}
}

// TestDuplicateOwnedInsert: a second copy of a live chunk is not stored,
// and its buffer is kept for reuse at once.
func TestDuplicateOwnedInsert(t *testing.T) {
	s := New()
	liveChunks(t, s, 100, 16, 40_000)
	a, abuf := ownedChunk(t, s, 1, 40_000)
	b, bbuf := ownedChunk(t, s, 1, 40_000)
	if b != a || a.Refs() != 2 {
		t.Fatal("the second copy was stored")
	}
	if enc, _ := a.Encoded(); !sameBuf(enc, abuf) {
		t.Fatal("the first copy lost its bytes")
	}
	if _, cbuf := ownedChunk(t, s, 2, 40_000); !sameBuf(cbuf, bbuf) {
		t.Fatal("the dropped copy's buffer was not reused")
	}
	a.Unref()
	a.Unref()
}

// TestFreeListBound: the store keeps at most an eighth of its chunks'
// bytes in free buffers, and an emptied store none (buffers kept are
// dropped again as the store shrinks).
func TestFreeListBound(t *testing.T) {
	s := New()
	var cs []*Chunk
	for k := range 16 {
		c, _ := ownedChunk(t, s, uint64(k), 40_000)
		cs = append(cs, c)
	}
	for _, c := range cs {
		c.Unref()
		if st := s.FreeStats(); st.Bytes > max(s.Bytes()/freeShare, 0) {
			t.Fatalf("free list %d bytes with %d in chunks", st.Bytes, s.Bytes())
		}
	}
	st := s.FreeStats()
	if st.Kept == 0 || st.Dropped != 16 || st.Bytes != 0 {
		t.Fatalf("%+v: want some buffers kept, and all 16 dropped in the end", st)
	}
}

// TestKeepForSnapshot: a chunk kept for a snapshot is not pinned in memory
// mode, and its buffer is never reused; a tiered store's is pinned.
func TestKeepForSnapshot(t *testing.T) {
	s := New()
	liveChunks(t, s, 100, 16, 40_000)
	a, abuf := ownedChunk(t, s, 1, 40_000)
	if a.KeepForSnapshot() {
		t.Fatal("KeepForSnapshot pinned a chunk in memory")
	}
	a.Unref()
	if st := s.FreeStats(); st.Kept != 0 || st.Dropped != 0 {
		t.Fatalf("the buffer of a chunk kept for a snapshot went to the free list: %+v", st)
	}
	if enc, _ := a.Encoded(); !sameBuf(enc, abuf) || mustData(t, a).GetChunkKey() != 1 {
		t.Fatal("a chunk kept for a snapshot lost its bytes")
	}
	if _, bbuf := ownedChunk(t, s, 2, 40_000); sameBuf(abuf, bbuf) {
		t.Fatal("a chunk kept for a snapshot had its buffer reused")
	}

	ts, err := NewTiered(Options{Mode: Hybrid, MemoryLimit: 1 << 20, Spill: NewMemSpill()})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	c := ts.Insert(chunk(7))
	if !c.KeepForSnapshot() || c.Refs() != 2 {
		t.Fatalf("a tiered chunk kept for a snapshot: refs %d, want a pin", c.Refs())
	}
	c.Unref()
	c.Unpin()
}

func TestPinOfReleasedRecycledChunkPanics(t *testing.T) {
	s := New()
	c, _ := ownedChunk(t, s, 1, 40_000)
	c.Unref()
	defer func() {
		if recover() == nil {
			t.Fatal("Pin after release did not panic")
		}
	}()
	c.Pin()
}

// TestRecycleConcurrent races inserts, pins and releases of chunks in
// reused buffers; every read must see the chunk's own key (run with -race).
func TestRecycleConcurrent(t *testing.T) {
	s := New()
	liveChunks(t, s, 1_000_000, 64, 40_000)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				key := uint64(g*1000 + i)
				c, _, err := insertOwned(s, key, 40_000)
				if err != nil {
					t.Error(err)
					return
				}
				c.Pin()
				c.Unref()
				if d, err := c.Data(); err != nil || d.GetChunkKey() != key {
					t.Errorf("chunk %d read back as %d, %v", key, d.GetChunkKey(), err)
				}
				c.Unpin()
			}
		}()
	}
	wg.Wait()
	if st := s.FreeStats(); st.Reused == 0 {
		t.Fatalf("%+v: no buffer was reused", st)
	}
}

func init() { PoisonRecycled = true }
