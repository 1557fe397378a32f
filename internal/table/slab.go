package table

import "github.com/reverie-rl/reverie/selector"

const (
	pageBits = 12
	pageSize = 1 << pageBits
)

// slab stores items by slot in fixed-size pages, so that growing it never
// copies the items already held. It hands out the most recently freed slot
// first, whose memory is the most likely to be cached, so slots stay dense:
// every slot is below the peak number of items held. Not safe for
// concurrent use.
type slab struct {
	pages [][]Item
	free  []selector.Slot
	next  selector.Slot // slots below next have been handed out at least once
}

// alloc returns a free slot and its zeroed item.
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
	return slot, s.at(slot)
}

func (s *slab) at(slot selector.Slot) *Item {
	return &s.pages[slot>>pageBits][slot&(pageSize-1)]
}

// release zeroes the slot's item and makes the slot free.
func (s *slab) release(slot selector.Slot) {
	*s.at(slot) = Item{}
	s.free = append(s.free, slot)
}

// reset forgets every item and slot.
func (s *slab) reset() { *s = slab{} }
