package chunkstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Mode says where a tiered store keeps chunk data.
type Mode int

const (
	// Hybrid keeps data in memory up to the limit and writes the least
	// recently used data to the spill past it.
	Hybrid Mode = iota + 1
	// Disk writes every chunk's data to the spill at insert and keeps
	// recently used data in memory up to the limit, as a cache.
	Disk
)

func (m Mode) String() string {
	switch m {
	case Hybrid:
		return "hybrid"
	case Disk:
		return "disk"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configures a tiered store.
type Options struct {
	// Mode is Hybrid or Disk.
	Mode Mode
	// MemoryLimit is the most bytes of encoded chunk data held in memory,
	// besides data being written to the spill; must be > 0.
	MemoryLimit int64
	// Spill holds the data that is not in memory; required. The store
	// does not close it.
	Spill Spill
}

// NewTiered returns an empty store that keeps chunk metadata in memory and
// chunk data in memory or in opts.Spill, as opts.Mode says. Close stops it.
func NewTiered(opts Options) (*Store, error) {
	switch {
	case opts.Mode != Hybrid && opts.Mode != Disk:
		return nil, fmt.Errorf("chunkstore: unknown mode %v", opts.Mode)
	case opts.MemoryLimit <= 0:
		return nil, fmt.Errorf("chunkstore: memory limit must be > 0, got %d", opts.MemoryLimit)
	case opts.Spill == nil:
		return nil, errors.New("chunkstore: no spill")
	}
	s := New()
	t := &tier{
		spill:        opts.Spill,
		limit:        opts.MemoryLimit,
		writeThrough: opts.Mode == Disk,
		wake:         make(chan struct{}, 1),
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	t.mu.lru.prev, t.mu.lru.next = &t.mu.lru, &t.mu.lru
	s.tier = t
	go t.deleteLoop()
	return s, nil
}

// Stats describes a tiered store's memory and spill traffic.
type Stats struct {
	// MemoryBytes is the encoded data held in memory, of which
	// SpillingBytes is being written to the spill.
	MemoryBytes, SpillingBytes int64
	// Hits counts reads served from memory, ColdReads reads from the
	// spill, ReadErrors failed reads.
	Hits, ColdReads, ReadErrors int64
	// Spills counts chunks written to the spill, SpillErrors failed
	// writes (the data stays in memory), Deletes the ids deleted from the
	// spill and DeleteErrors failed batches of deletes.
	Spills, SpillErrors, Deletes, DeleteErrors int64
}

// Tiered reports whether the store keeps data in a spill (the hybrid and
// disk modes).
func (s *Store) Tiered() bool { return s.tier != nil }

// Stats returns the store's figures; zero in memory mode.
func (s *Store) Stats() Stats {
	t := s.tier
	if t == nil {
		return Stats{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{
		MemoryBytes:   t.mu.hot + t.mu.spilling,
		SpillingBytes: t.mu.spilling,
		Hits:          t.hits.Load(),
		ColdReads:     t.coldReads.Load(),
		ReadErrors:    t.readErrors.Load(),
		Spills:        t.spills.Load(),
		SpillErrors:   t.spillErrors.Load(),
		Deletes:       t.deletes.Load(),
		DeleteErrors:  t.deleteErrors.Load(),
	}
}

// tier holds the chunk data of a tiered store: an LRU list of the chunks
// whose data is in memory, and the spill.
type tier struct {
	spill        Spill
	limit        int64
	writeThrough bool

	// Counters, for Stats; updated atomically.
	hits, coldReads, readErrors atomic.Int64
	spills, spillErrors         atomic.Int64
	deletes, deleteErrors       atomic.Int64

	wake      chan struct{} // a send asks deleteLoop to look at mu.deleting
	stop      chan struct{} // closed by close
	done      chan struct{} // closed when deleteLoop returns
	closeOnce sync.Once

	// mu guards the fields below and the tier fields of every Chunk.
	// Nothing holds it across a spill call.
	mu struct {
		sync.Mutex
		lru      Chunk    // sentinel: lru.next is the most recently used
		hot      int64    // bytes of the chunks in lru
		spilling int64    // bytes of chunks being written to the spill
		deleting []uint64 // ids to delete from the spill
		closed   bool
	}
}

// victim is a chunk evictLocked took out of memory that must be written to
// the spill, with its data.
type victim struct {
	c   *Chunk
	buf []byte
}

// add puts a new chunk in memory. In disk mode it first writes it through.
func (t *tier) add(c *Chunk) {
	if t.writeThrough {
		t.mu.Lock()
		c.spilling = true
		t.mu.spilling += int64(c.size)
		t.mu.Unlock()
		t.write([]victim{{c, c.buf}}, true)
		return
	}
	t.mu.Lock()
	t.pushFrontLocked(c)
	vs := t.evictLocked(nil)
	t.mu.Unlock()
	t.write(vs, false)
}

// write writes victims to the spill, outside the lock, then drops their
// data from memory. keep puts successfully written data back at the front
// of the LRU list instead (disk mode's insert). A failed write puts the
// data back in memory (over the limit, to be tried again at the next
// eviction): memory use grows rather than data being lost.
func (t *tier) write(vs []victim, keep bool) {
	for len(vs) > 0 {
		var more []victim
		for _, v := range vs {
			err := t.spill.Put(v.c.id, v.buf)
			if err == nil {
				t.spills.Add(1)
			} else {
				t.spillErrors.Add(1)
			}
			t.mu.Lock()
			c := v.c
			c.spilling = false
			t.mu.spilling -= int64(c.size)
			switch {
			case c.released:
				c.buf = nil
				if err == nil {
					t.deleteLocked(c.id)
				}
			case err != nil || keep:
				c.onDisk = err == nil
				if c.next == nil {
					t.pushFrontLocked(c)
				}
				if err == nil {
					more = t.evictLocked(more)
				}
			default:
				c.onDisk = true
				c.buf = nil
			}
			t.mu.Unlock()
		}
		vs, keep = more, false
	}
}

// encoded returns c's encoding.
func (t *tier) encoded(c *Chunk) ([]byte, error) {
	t.mu.Lock()
	if c.released {
		t.mu.Unlock()
		return nil, fmt.Errorf("chunk %d: %w", c.key, ErrReleased)
	}
	if buf := c.buf; buf != nil {
		if c.next != nil {
			t.moveToFrontLocked(c)
		}
		t.mu.Unlock()
		t.hits.Add(1)
		return buf, nil
	}
	closed := t.mu.closed
	t.mu.Unlock()
	if closed {
		t.readErrors.Add(1)
		return nil, fmt.Errorf("chunk %d: %w", c.key, ErrClosed)
	}

	t.coldReads.Add(1)
	buf, err := t.spill.Get(c.id)
	if err != nil {
		t.readErrors.Add(1)
		return nil, fmt.Errorf("%w: chunk %d: %v", ErrRead, c.key, err)
	}
	if len(buf) != c.size {
		t.readErrors.Add(1)
		return nil, fmt.Errorf("%w: chunk %d: read %d bytes, want %d", ErrRead, c.key, len(buf), c.size)
	}
	t.mu.Lock()
	var vs []victim
	if !c.released && c.buf == nil {
		c.buf = buf
		t.pushFrontLocked(c)
		vs = t.evictLocked(nil)
	}
	t.mu.Unlock()
	t.write(vs, false)
	return buf, nil
}

// release forgets the data of c, whose last reference was dropped.
func (t *tier) release(c *Chunk) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.released = true
	if c.next != nil {
		t.unlinkLocked(c)
	}
	if !c.spilling {
		// A chunk being written keeps its buf until write sees released;
		// write then deletes what it wrote.
		c.buf = nil
	}
	if c.onDisk {
		c.onDisk = false
		t.deleteLocked(c.id)
	}
}

// evictLocked takes least recently used chunks out of memory until the data
// in the LRU list fits the limit. Data already in the spill is dropped at
// once; the rest is appended to vs to be written by the caller, after it
// unlocks, and counts as spilling until then.
func (t *tier) evictLocked(vs []victim) []victim {
	for t.mu.hot > t.limit {
		c := t.mu.lru.prev
		if c == &t.mu.lru {
			break
		}
		t.unlinkLocked(c)
		if c.onDisk {
			c.buf = nil
			continue
		}
		c.spilling = true
		t.mu.spilling += int64(c.size)
		vs = append(vs, victim{c, c.buf})
	}
	return vs
}

func (t *tier) pushFrontLocked(c *Chunk) {
	head := &t.mu.lru
	c.prev, c.next = head, head.next
	head.next.prev = c
	head.next = c
	t.mu.hot += int64(c.size)
}

func (t *tier) unlinkLocked(c *Chunk) {
	c.prev.next = c.next
	c.next.prev = c.prev
	c.prev, c.next = nil, nil
	t.mu.hot -= int64(c.size)
}

func (t *tier) moveToFrontLocked(c *Chunk) {
	if t.mu.lru.next == c {
		return
	}
	t.unlinkLocked(c)
	t.pushFrontLocked(c)
}

// deleteLocked queues id for deletion from the spill.
func (t *tier) deleteLocked(id uint64) {
	if t.mu.closed {
		return // nobody would take it; the spill's owner wipes it at close
	}
	t.mu.deleting = append(t.mu.deleting, id)
	if len(t.mu.deleting) == 1 {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// deleteLoop deletes released chunks' data from the spill in batches, until
// close. Failed batches are retried once, then counted and dropped: the
// spill is wiped at the next start anyway.
func (t *tier) deleteLoop() {
	defer close(t.done)
	for {
		select {
		case <-t.wake:
		case <-t.stop:
			t.flushDeletes()
			return
		}
		t.flushDeletes()
	}
}

func (t *tier) flushDeletes() {
	t.mu.Lock()
	ids := t.mu.deleting
	t.mu.deleting = nil
	t.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	err := t.spill.Delete(ids)
	if err != nil {
		err = t.spill.Delete(ids)
	}
	if err != nil {
		t.deleteErrors.Add(1)
		return
	}
	t.deletes.Add(int64(len(ids)))
}

func (t *tier) close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.mu.closed = true
		t.mu.Unlock()
		close(t.stop)
	})
	<-t.done
	return nil
}
