package table

import (
	"slices"

	"github.com/reverie-rl/reverie/selector"
)

const (
	pageBits = 12
	pageSize = 1 << pageBits
)

// slab stores items by slot in fixed-size pages, so that growing it never
// copies the items already held. It hands out the most recently freed slot
// first, whose memory is the most likely to be cached, so slots stay dense:
// every slot is below the peak number of items held. Not safe for
// concurrent use.
//
// While a snapshot is installed (see snapshot.go), every change to a page
// first copies the page into the snapshot unless it was copied already:
// writers must get their *Item from mutable, never from at.
type slab struct {
	pages [][]Item
	free  []selector.Slot
	next  selector.Slot // slots below next have been handed out at least once
	snap  *pageSnapshot // installed snapshot, or nil
}

// pageSnapshot is a copy-on-write image of a slab's pages at one instant.
// pages[p] is nil until page p is copied.
type pageSnapshot struct {
	pages   [][]Item
	missing int // pages not copied yet
	copied  int // pages copied by writes (the rest by Snapshot.Capture)
}

// alloc returns a free slot and its zeroed item, ready to be written.
func (s *slab) alloc() (selector.Slot, *Item) {
	var slot selector.Slot
	if n := len(s.free); n > 0 {
		slot = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		slot = s.next
		s.next++
		if int(slot>>pageBits) == len(s.pages) {
			s.pages = append(s.pages, make([]Item, pageSize))
		}
	}
	return slot, s.mutable(slot)
}

// at returns the item in slot for reading.
func (s *slab) at(slot selector.Slot) *Item {
	return &s.pages[slot>>pageBits][slot&(pageSize-1)]
}

// mutable returns the item in slot for writing: it first preserves the
// slot's page in the installed snapshot, if any.
func (s *slab) mutable(slot selector.Slot) *Item {
	if s.snap != nil {
		s.capture(int(slot >> pageBits))
	}
	return s.at(slot)
}

// capture copies page p into the installed snapshot unless it is there
// already, or did not exist when the snapshot was taken.
func (s *slab) capture(p int) {
	if s.needsCapture(p) {
		s.captureInto(p, slices.Clone(s.pages[p]))
		s.snap.copied++
	}
}

func (s *slab) needsCapture(p int) bool {
	return p < len(s.snap.pages) && s.snap.pages[p] == nil
}

// captureInto stores buf, a copy of page p, as the snapshot's page.
func (s *slab) captureInto(p int, buf []Item) {
	// Items hold only pointers to immutable data (trajectory, chunks), so a
	// shallow copy preserves them.
	copy(buf, s.pages[p])
	s.snap.pages[p] = buf
	s.snap.missing--
}

// captureAll copies every page the snapshot still misses.
func (s *slab) captureAll() {
	for p := range s.snap.pages {
		s.capture(p)
	}
}

// installSnapshot starts a snapshot of the current pages. Nothing is copied
// yet.
func (s *slab) installSnapshot() *pageSnapshot {
	s.snap = &pageSnapshot{pages: make([][]Item, len(s.pages)), missing: len(s.pages)}
	return s.snap
}

// release zeroes the slot's item and makes the slot free.
func (s *slab) release(slot selector.Slot) {
	*s.mutable(slot) = Item{}
	s.free = append(s.free, slot)
}

// reset forgets every item and slot. An installed snapshot is completed
// first and stays installed.
func (s *slab) reset() {
	if s.snap != nil {
		s.captureAll()
	}
	*s = slab{snap: s.snap}
}
