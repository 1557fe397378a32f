package chunkstore

import (
	"math/bits"
	"sync"
)

// Reuse of chunk buffers (memory mode).
//
// In memory mode a chunk's encoding used to be left to the collector once
// the chunk was released. That costs twice. The collector lets the heap
// grow to about twice the live data before it reuses any of it, so a table
// that has just filled touches as many fresh pages again (each one a page
// fault and the kernel zeroing it) before its evictions are reused, and
// the process holds about twice its data. And the chunks' bytes are most
// of what a server allocates, so they set how often the collector runs. A
// store made by New therefore keeps the buffers of released chunks of at
// least recycleMinBytes and hands them to the next insert of a chunk of the
// same size class (AllocChunk and InsertOwned), much as malloc reuses freed
// memory.
//
// A reused buffer is overwritten, so nothing may read a chunk's bytes after
// it is both released and unpinned: a chunk inserted with InsertOwned has
// NeedsPin true, and Pin and Unpin count the readers of its bytes. The
// buffer is reused only when the chunk is released and its count reaches
// zero. A pin that is never dropped only keeps the buffer from reuse; the
// collector frees it as before. Chunks a snapshot may still show when
// their items leave a table are not pinned but never reused
// (KeepForSnapshot): the snapshot lets go of them item by item.

const (
	// recycleMinBytes is the smallest buffer reused: the runtime's
	// large-object size, from which it allocates objects in whole pages
	// of pageBytes. Reusing smaller chunks' buffers paid at first
	// (400 B and 4 kB inserts cost 5-20% less server CPU), but it keeps
	// the heap small, so that the first checkpoints under load, which
	// keep the chunks evicted while they run, grew it into fresh memory
	// and slowed the load they run beside (see "Reusing the buffers of
	// released chunks" in docs/benchmarks-notes.md).
	recycleMinBytes = 32 << 10
	pageBytes       = 8 << 10
	// maxFreeBytes bounds the free buffers kept, and so the memory a
	// store holds beyond its chunks; freeShare bounds them to a share of
	// the chunks' bytes, as they were at the last release of a chunk in
	// a reused buffer, so that an emptied store lets go of them.
	maxFreeBytes = 64 << 20
	freeShare    = 8 // at most 1/freeShare of Bytes()
)

// PoisonRecycled makes stores overwrite each buffer they take back for
// reuse, so that tests see any read of a chunk's bytes after its buffer
// was released. Set it before any store is used.
var PoisonRecycled bool

// freeList holds released chunk buffers by capacity (classCap). The most
// recently freed buffer of a class is reused first: of the free ones, it is
// the most likely still in cache.
type freeList struct {
	mu    sync.Mutex
	byCap map[int][][]byte // guarded by mu
	bytes int64            // guarded by mu: total capacity in byCap
	// Counters for tests, guarded by mu.
	reused, kept, dropped int64
}

// classCap is the capacity of the buffers of n-byte chunks, n at least
// recycleMinBytes: whole pages, and classes at least a 32nd of a power of
// two apart, so that chunks of similar sizes share a class while a buffer
// wastes at most about 3% of its bytes.
func classCap(n int) int {
	step := max(pageBytes, 1<<(bits.Len(uint(n))-6))
	return (n + step - 1) &^ (step - 1)
}

// AllocChunk returns a buffer of length n for a chunk's encoding, to be
// filled and passed to InsertOwned, or nil if the store does not reuse
// buffers of that size (then allocate it as usual and use InsertEncoded).
// The returned bytes are undefined.
func (s *Store) AllocChunk(n int) []byte {
	if s.tier != nil || n < recycleMinBytes {
		return nil
	}
	c := classCap(n)
	f := &s.free
	f.mu.Lock()
	if l := f.byCap[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		f.byCap[c] = l[:len(l)-1]
		f.bytes -= int64(c)
		f.reused++
		f.mu.Unlock()
		return b[:n]
	}
	f.mu.Unlock()
	return make([]byte, n, c)
}

// InsertOwned is InsertEncoded for an encoding in a buffer AllocChunk
// returned: once the chunk is released and no pin is left on it, the store
// reuses the buffer for another chunk.
func (s *Store) InsertOwned(m Meta, enc []byte) *Chunk {
	return s.insert(m, enc, s.tier == nil && len(enc) >= recycleMinBytes && cap(enc) == classCap(len(enc)))
}

// RecycleMinBytes is the smallest chunk encoding whose buffer the store
// reuses (AllocChunk).
const RecycleMinBytes = recycleMinBytes

// FreeChunk takes back a buffer AllocChunk returned that holds no chunk:
// a request that failed before its chunk was inserted. It reports false,
// and keeps nothing, if b is not of a size the store reuses.
func (s *Store) FreeChunk(b []byte) bool {
	if s.tier != nil || cap(b) < recycleMinBytes || cap(b) != classCap(cap(b)) {
		return false
	}
	s.putFree(b)
	return true
}

// putFree takes back the buffer of a released, unpinned chunk.
func (s *Store) putFree(b []byte) {
	c := cap(b)
	if PoisonRecycled {
		b = b[:c]
		for i := range b {
			b[i] = 0xa5
		}
	}
	f := &s.free
	f.mu.Lock()
	defer f.mu.Unlock()
	if limit := min(maxFreeBytes, s.bytes.Load()/freeShare); f.bytes+int64(c) > limit {
		f.dropped++
		f.trim(limit) // the store's chunks may have shrunk since
		return
	}
	if f.byCap == nil {
		f.byCap = make(map[int][][]byte)
	}
	f.byCap[c] = append(f.byCap[c], b[:0])
	f.bytes += int64(c)
	f.kept++
}

// trim leaves buffers to the collector until at most limit bytes are
// kept. f.mu must be held.
func (f *freeList) trim(limit int64) {
	for c, l := range f.byCap {
		for len(l) > 0 && f.bytes > limit {
			l[0] = nil // the oldest of the class
			l = l[1:]
			f.bytes -= int64(c)
			f.dropped++
		}
		if len(l) == 0 {
			delete(f.byCap, c)
		} else {
			f.byCap[c] = l
		}
		if f.bytes <= limit {
			return
		}
	}
}

// FreeStats reports the buffers of released chunks: how many AllocChunk
// reused, how many were kept for reuse and how many were left to the
// collector (the free list was full), and the bytes now held for reuse.
type FreeStats struct {
	Reused, Kept, Dropped int64 // Dropped: at release, or kept and dropped later
	Bytes                 int64
}

// FreeStats returns the store's counts of reused buffers.
func (s *Store) FreeStats() FreeStats {
	f := &s.free
	f.mu.Lock()
	defer f.mu.Unlock()
	return FreeStats{Reused: f.reused, Kept: f.kept, Dropped: f.dropped, Bytes: f.bytes}
}

// dropBufRef drops one count on a reused buffer's readers; the last one
// gives the buffer back.
func (c *Chunk) dropBufRef() {
	switch n := c.bufRefs.Add(-1); {
	case n == 0:
		if !c.noReuse.Load() {
			c.store.putFree(c.buf)
		}
	case n < 0:
		panic("chunkstore: Unpin of an unpinned chunk")
	}
}
