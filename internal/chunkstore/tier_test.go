package chunkstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/leakcheck"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// forEachMode runs test against a memory store, a hybrid store whose limit
// holds a few small chunks, and a disk store.
func forEachMode(t *testing.T, test func(t *testing.T, s *Store)) {
	t.Run("memory", func(t *testing.T) { test(t, New()) })
	for _, mode := range []Mode{Hybrid, Disk} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newTiered(t, mode, 200, NewMemSpill())
			test(t, s)
		})
	}
}

func newTiered(t testing.TB, mode Mode, limit int64, sp Spill) *Store {
	t.Helper()
	s, err := NewTiered(Options{Mode: mode, MemoryLimit: limit, Spill: sp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustData(t testing.TB, c *Chunk) *reverbpb.ChunkData {
	t.Helper()
	d, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitDeleted waits for the delete goroutine to empty the spill to want ids.
func waitDeleted(t *testing.T, sp *MemSpill, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); sp.Len() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("spill holds %d ids, want %d", sp.Len(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTieredMetadata(t *testing.T) {
	forEachMode(t, func(t *testing.T, s *Store) {
		d := payloadChunk(9, 100)
		d.Data.Tensors = append(d.Data.Tensors, proto.CloneOf(d.Data.Tensors[0]))
		d.Data.Tensors[1].TensorShape = nil
		c := s.Insert(d)
		defer c.Unref()
		if c.Key() != 9 || c.EpisodeID() != 3 || c.NumTensors() != 2 || c.Size() != proto.Size(d) {
			t.Fatalf("key %d episode %d tensors %d size %d", c.Key(), c.EpisodeID(), c.NumTensors(), c.Size())
		}
		if r, ok := c.Rows(0); !ok || r != 1 {
			t.Fatalf("Rows(0) = %d, %v", r, ok)
		}
		for _, i := range []int{-1, 1, 2} {
			if _, ok := c.Rows(i); ok {
				t.Fatalf("Rows(%d) ok", i)
			}
		}
		if got := mustData(t, c); !proto.Equal(got, d) {
			t.Fatal("data changed")
		}
	})
}

func TestHybridSpillAndReload(t *testing.T) {
	sp := NewMemSpill()
	size := int64(proto.Size(payloadChunk(1, 1000)))
	s := newTiered(t, Hybrid, 3*size, sp)
	var cs []*Chunk
	for k := range uint64(10) {
		cs = append(cs, s.Insert(payloadChunk(k+1, 1000)))
		if st := s.Stats(); st.MemoryBytes > 3*size {
			t.Fatalf("after %d inserts %d bytes in memory, limit %d", k+1, st.MemoryBytes, 3*size)
		}
	}
	if st := s.Stats(); sp.Len() != 7 || st.Spills != 7 || st.MemoryBytes != 3*size {
		t.Fatalf("spill holds %d, stats %+v", sp.Len(), st)
	}
	// Newest first: three hits, then cold reads.
	for k := len(cs) - 1; k >= 0; k-- {
		if got := mustData(t, cs[k]); !proto.Equal(got, payloadChunk(uint64(k+1), 1000)) {
			t.Fatalf("chunk %d read back different", k)
		}
	}
	st := s.Stats()
	if st.ColdReads != 7 || st.Hits != 3 || st.MemoryBytes != 3*size {
		t.Fatalf("after reading all: %+v", st)
	}
	// Reloaded chunks keep their spilled copy: evicting them again writes
	// nothing.
	if sp.Len() != 10 || st.Spills != 10 {
		t.Fatalf("spill holds %d ids, %d spills; want 10 and 10", sp.Len(), st.Spills)
	}
	for _, c := range cs {
		c.Unref()
	}
	waitDeleted(t, sp, 0)
	if st := s.Stats(); st.MemoryBytes != 0 || s.Len() != 0 || s.Bytes() != 0 || st.Deletes != 10 {
		t.Fatalf("after releasing all: len %d, %+v", s.Len(), st)
	}
}

func TestHybridLRUOrder(t *testing.T) {
	sp := NewMemSpill()
	size := int64(proto.Size(payloadChunk(1, 1000)))
	s := newTiered(t, Hybrid, 3*size, sp)
	a, b, c := s.Insert(payloadChunk(1, 1000)), s.Insert(payloadChunk(2, 1000)), s.Insert(payloadChunk(3, 1000))
	mustData(t, a) // a is now the most recently used; b the least
	d := s.Insert(payloadChunk(4, 1000))
	if !sp.Has(b.id) || sp.Has(a.id) || sp.Has(c.id) || sp.Has(d.id) {
		t.Fatalf("spilled a %v b %v c %v d %v; want only b", sp.Has(a.id), sp.Has(b.id), sp.Has(c.id), sp.Has(d.id))
	}
	mustData(t, b) // cold: loads b and evicts c
	if !sp.Has(c.id) || sp.Has(a.id) || sp.Has(d.id) {
		t.Fatal("reading b did not evict c")
	}
	for _, x := range []*Chunk{a, b, c, d} {
		x.Unref()
	}
}

func TestDiskWritesThrough(t *testing.T) {
	sp := NewMemSpill()
	size := int64(proto.Size(payloadChunk(1, 1000)))
	s := newTiered(t, Disk, 2*size, sp)
	var cs []*Chunk
	for k := range uint64(5) {
		cs = append(cs, s.Insert(payloadChunk(k+1, 1000)))
		if sp.Len() != int(k)+1 {
			t.Fatalf("after %d inserts the spill holds %d", k+1, sp.Len())
		}
	}
	if st := s.Stats(); st.MemoryBytes != 2*size || st.Spills != 5 {
		t.Fatalf("stats %+v", st)
	}
	for k := len(cs) - 1; k >= 0; k-- {
		if got := mustData(t, cs[k]); !proto.Equal(got, payloadChunk(uint64(k+1), 1000)) {
			t.Fatalf("chunk %d read back different", k)
		}
		cs[k].Unref()
	}
	if st := s.Stats(); st.Spills != 5 || st.Hits != 2 || st.ColdReads != 3 {
		t.Fatalf("reads wrote or missed: %+v", st)
	}
	waitDeleted(t, sp, 0)
}

func TestReadErrors(t *testing.T) {
	sp := NewMemSpill()
	size := int64(proto.Size(payloadChunk(1, 1000)))
	s := newTiered(t, Hybrid, size, sp)
	cold, hot := s.Insert(payloadChunk(41, 1000)), s.Insert(payloadChunk(42, 1000))
	defer cold.Unref()
	defer hot.Unref()

	injected := errors.New("injected")
	sp.SetFail(injected)
	if _, err := cold.Data(); !errors.Is(err, ErrRead) || !strings.Contains(err.Error(), "chunk 41") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("cold read with a failing spill: %v", err)
	}
	mustData(t, hot) // memory does not need the spill
	// A failed spill write keeps the data in memory, over the limit.
	third := s.Insert(payloadChunk(43, 1000))
	defer third.Unref()
	if st := s.Stats(); st.SpillErrors != 1 || st.MemoryBytes != 2*size || st.ReadErrors != 1 {
		t.Fatalf("after a failed write: %+v", st)
	}
	sp.SetFail(nil)
	mustData(t, cold)
	mustData(t, hot)

	s.Close()
	if _, err := hot.Data(); err != nil {
		t.Fatalf("memory read after close: %v", err)
	}
	c := []*Chunk{cold, hot, third}
	var sawClosed bool
	for _, x := range c {
		if _, err := x.Data(); errors.Is(err, ErrClosed) && strings.Contains(err.Error(), fmt.Sprint(x.Key())) {
			sawClosed = true
		} else if err != nil {
			t.Fatalf("read after close: %v", err)
		}
	}
	if !sawClosed {
		t.Fatal("no cold read failed with ErrClosed after Close")
	}
}

func TestPinKeepsDataReadable(t *testing.T) {
	forEachMode(t, func(t *testing.T, s *Store) {
		c := s.Insert(payloadChunk(7, 1000))
		c.Pin()
		c.Unref() // the owner lets go; the pin keeps the data
		mustData(t, c)
		c.Unpin()
		if s.Len() != 0 {
			t.Fatal("Unpin did not release")
		}
		if s.tier != nil {
			if _, err := c.Data(); !errors.Is(err, ErrReleased) {
				t.Fatalf("read of a released chunk: %v", err)
			}
		}
	})
}

// TestTieredConcurrent races inserts, reads, cold loads and releases over a
// small memory limit; run with -race. Every read sees its chunk's data, and
// the spill ends empty.
func TestTieredConcurrent(t *testing.T) {
	for _, mode := range []Mode{Hybrid, Disk} {
		t.Run(mode.String(), func(t *testing.T) {
			sp := NewMemSpill()
			s := newTiered(t, mode, 4*int64(proto.Size(payloadChunk(1, 500))), sp)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var held []*Chunk
					for i := range 2000 {
						key := uint64(i*7+g)%23 + 1
						c := s.Insert(payloadChunk(key, 500))
						held = append(held, c)
						x := held[(i*13)%len(held)]
						d, err := x.Data()
						if err != nil || d.GetChunkKey() != x.Key() || d.GetData().GetTensors()[0].GetTensorContent()[1] != byte(x.Key())+1 {
							t.Errorf("read of chunk %d: %v", x.Key(), err)
							return
						}
						if len(held) > 6 {
							held[0].Unref()
							held = held[1:]
						}
					}
					for _, c := range held {
						c.Unref()
					}
				}()
			}
			wg.Wait()
			if s.Len() != 0 || s.Bytes() != 0 {
				t.Fatalf("store holds %d chunks after every reference was dropped", s.Len())
			}
			s.Close()
			if sp.Len() != 0 || s.Stats().MemoryBytes != 0 {
				t.Fatalf("spill holds %d ids, memory %d bytes", sp.Len(), s.Stats().MemoryBytes)
			}
		})
	}
}

func TestNewTieredValidates(t *testing.T) {
	for _, o := range []Options{
		{Mode: 0, MemoryLimit: 1, Spill: NewMemSpill()},
		{Mode: Hybrid, MemoryLimit: 0, Spill: NewMemSpill()},
		{Mode: Disk, MemoryLimit: 1},
	} {
		if s, err := NewTiered(o); err == nil {
			s.Close()
			t.Errorf("NewTiered(%+v) accepted", o)
		}
	}
}

// TestReleaseAfterCloseQueuesNothing: chunks released after Close (the
// server releases its tables after closing the store) queue no spill
// deletes, which no goroutine would ever take.
func TestReleaseAfterCloseQueuesNothing(t *testing.T) {
	sp := NewMemSpill()
	s := newTiered(t, Disk, 200, sp)
	var cs []*Chunk
	for k := uint64(1); k <= 10; k++ {
		cs = append(cs, s.Insert(payloadChunk(k, 100)))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		c.Unref()
	}
	s.tier.mu.Lock()
	n := len(s.tier.mu.deleting)
	s.tier.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d spill deletes queued after Close", n)
	}
}
