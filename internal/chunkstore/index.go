package chunkstore

import (
	"sync"
	"sync/atomic"

	"github.com/reverie-rl/reverie/internal/openaddr"
)

// index maps chunk keys to chunks. Go's map under the insert and release
// churn of a full table cost 10% of the server's CPU on 400 B inserts,
// most of it probing; see package openaddr. Not safe for concurrent use.
//
// The map holds no pointers: its values are slots of the store's slots,
// which hold the chunks. A collection must mark every chunk the index
// reaches, and in the map's hash order each one was a cache miss: on a
// server holding 1.1M chunks of 400 B the index held more than half of a
// collection's CPU (docs/benchmarks-notes.md, "The chunk index and the
// collector"). Slots are handed out roughly in the order chunks are
// inserted, as their records are allocated, so the collector walks them
// in about the order they lie in memory.
type index struct {
	m     openaddr.Map[uint32] // key -> slot+1
	slots *slots
}

func newIndex(sl *slots) index { return index{m: openaddr.New[uint32](), slots: sl} }

// get returns the chunk with key, or nil.
func (ix *index) get(key uint64) *Chunk {
	v, ok := ix.m.Get(key)
	if !ok {
		return nil
	}
	return ix.slots.get(v - 1)
}

// set maps key to c. replacing says whether key maps to a chunk now (as
// get has just told the caller), whose slot c then takes; otherwise key
// gets a slot of its own, with no lookup first.
func (ix *index) set(key uint64, c *Chunk, replacing bool) {
	if replacing {
		v, _ := ix.m.Get(key)
		ix.slots.put(v-1, c)
		return
	}
	s := ix.slots.alloc()
	ix.slots.put(s, c)
	ix.m.Set(key, s+1)
}

// deleteChunk removes key if it maps to c, and frees its slot.
func (ix *index) deleteChunk(key uint64, c *Chunk) {
	v, ok := ix.m.DeleteFunc(key, func(v uint32) bool { return ix.slots.get(v-1) == c })
	if !ok {
		return
	}
	ix.slots.put(v-1, nil)
	ix.slots.release(v - 1)
}

// slotPageLen is the number of slots in a page of slots (8 kB).
const slotPageLen = 1024

type slotPage [slotPageLen]*Chunk

// slots holds the chunks of a store's shards, one per slot, for their
// indexes. A slot is handed out by alloc and given back by release, under
// the slots' lock; in between, the shard whose index holds the slot reads
// and writes it under the shard's lock. The memory of the slots grows to
// the most chunks held at once and is not given back.
type slots struct {
	mu    sync.Mutex
	n     uint32   // slots handed out at least once; guarded by mu
	free  []uint32 // released slots, reused last in, first out; guarded by mu
	pages atomic.Pointer[[]*slotPage]
}

// alloc returns a free slot, which holds nil.
func (sl *slots) alloc() uint32 {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if k := len(sl.free); k > 0 {
		s := sl.free[k-1]
		sl.free = sl.free[:k-1]
		return s
	}
	s := sl.n
	if s == 1<<32-1 {
		panic("chunkstore: more than 2^32-1 chunks held at once")
	}
	sl.n++
	var pages []*slotPage
	if p := sl.pages.Load(); p != nil {
		pages = *p
	}
	if int(s/slotPageLen) == len(pages) {
		// Readers hold the old directory and read only below its length,
		// so the new page may go into its spare capacity.
		grown := pages
		if len(pages) == cap(pages) {
			grown = make([]*slotPage, len(pages), max(4, 2*len(pages)))
			copy(grown, pages)
		}
		grown = append(grown, new(slotPage))
		sl.pages.Store(&grown)
	}
	return s
}

// release gives back slot s, which must hold nil.
func (sl *slots) release(s uint32) {
	sl.mu.Lock()
	sl.free = append(sl.free, s)
	sl.mu.Unlock()
}

func (sl *slots) at(s uint32) **Chunk {
	return &(*sl.pages.Load())[s/slotPageLen][s%slotPageLen]
}

func (sl *slots) get(s uint32) *Chunk    { return *sl.at(s) }
func (sl *slots) put(s uint32, c *Chunk) { *sl.at(s) = c }
