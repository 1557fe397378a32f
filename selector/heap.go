package selector

var _ Selector = (*priorityHeap)(nil)

// heapArity is the number of children of a heap node.
const heapArity = 4

// heapItem is one entry of a priorityHeap. Items are ordered by
// (order, seq).
type heapItem struct {
	order float64 // the priority, negated in a max-heap
	seq   uint64  // when the slot was last inserted or updated
	slot  Slot
}

// priorityHeap is a 4-ary heap of items in a slice: half the depth of a
// binary heap, and a node's four children sit in adjacent memory, which
// matters once the heap outgrows the caches. pos, indexed by slot, follows
// each slot's position in items, so that sifting updates a plain int32
// slice rather than a map.
type priorityHeap struct {
	items []heapItem
	pos   []int32 // slot -> position in items, or nilSlot when absent
	seq   uint64  // counts inserts and updates
	max   bool
}

// NewHeap returns a selector that picks the slot of lowest priority (of
// highest, when minHeap is false) with probability 1. Of slots with equal
// priorities it picks the one least recently inserted or updated.
func NewHeap(minHeap bool) Selector {
	return &priorityHeap{max: !minHeap}
}

// NewMinHeap returns NewHeap(true).
func NewMinHeap() Selector { return NewHeap(true) }

// NewMaxHeap returns NewHeap(false).
func NewMaxHeap() Selector { return NewHeap(false) }

// CheckPriority rejects NaN; any other priority, infinities included, is
// accepted.
func (h *priorityHeap) CheckPriority(priority float64) error { return checkNotNaN(priority) }

func (h *priorityHeap) order(priority float64) float64 {
	if h.max {
		return -priority
	}
	return priority
}

// Insert adds slot with priority.
func (h *priorityHeap) Insert(slot Slot, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	checkSlot(slot)
	if int(slot) >= len(h.pos) {
		h.pos = growPositions(h.pos, slot)
	} else if h.pos[slot] != nilSlot {
		return ErrExists
	}
	h.seq++
	h.items = append(h.items, heapItem{order: h.order(priority), seq: h.seq, slot: slot})
	i := len(h.items) - 1
	h.pos[slot] = int32(i)
	h.up(i)
	return nil
}

// Update gives slot a new priority, placing it after the slots of equal
// priority.
func (h *priorityHeap) Update(slot Slot, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	i := position(h.pos, slot)
	if i == nilSlot {
		return ErrNotFound
	}
	h.seq++
	h.items[i].order, h.items[i].seq = h.order(priority), h.seq
	h.fix(int(i))
	return nil
}

// Delete removes slot, moving the last item into its place.
func (h *priorityHeap) Delete(slot Slot) error {
	p := position(h.pos, slot)
	if p == nilSlot {
		return ErrNotFound
	}
	h.pos[slot] = nilSlot
	i, last := int(p), len(h.items)-1
	if i != last {
		h.place(i, h.items[last])
	}
	h.items = h.items[:last]
	if i != last {
		h.fix(i)
	}
	return nil
}

// Sample returns the slot at the top of the heap.
func (h *priorityHeap) Sample() (Choice, error) {
	if len(h.items) == 0 {
		return Choice{}, ErrEmpty
	}
	return Choice{Slot: h.items[0].slot, Probability: 1}, nil
}

// Len returns the number of slots held.
func (h *priorityHeap) Len() int { return len(h.items) }

// Clear removes every slot and releases their memory. The insert counter
// carries on.
func (h *priorityHeap) Clear() { h.items, h.pos = nil, nil }

// Spec returns the MinHeap or MaxHeap spec.
func (h *priorityHeap) Spec() Spec {
	if h.max {
		return Spec{Kind: KindMaxHeap}
	}
	return Spec{Kind: KindMinHeap}
}

// before reports whether a goes above b in the heap.
func before(a, b heapItem) bool {
	return a.order < b.order || a.order == b.order && a.seq < b.seq
}

// place puts it at position i.
func (h *priorityHeap) place(i int, it heapItem) {
	h.items[i] = it
	h.pos[it.slot] = int32(i)
}

// fix restores the heap order around position i.
func (h *priorityHeap) fix(i int) {
	if !h.up(i) {
		h.down(i)
	}
}

// up moves the item at i towards the root while it goes before its
// parent, and reports whether it moved.
func (h *priorityHeap) up(i int) bool {
	it, start := h.items[i], i
	for i > 0 {
		parent := (i - 1) / heapArity
		if !before(it, h.items[parent]) {
			break
		}
		h.place(i, h.items[parent])
		i = parent
	}
	if i == start {
		return false
	}
	h.place(i, it)
	return true
}

// down moves the item at i towards the leaves while a child goes before it.
func (h *priorityHeap) down(i int) {
	n := len(h.items)
	it, start := h.items[i], i
	for {
		first := heapArity*i + 1
		if first >= n {
			break
		}
		c := first
		for j := first + 1; j < min(first+heapArity, n); j++ {
			if before(h.items[j], h.items[c]) {
				c = j
			}
		}
		if !before(h.items[c], it) {
			break
		}
		h.place(i, h.items[c])
		i = c
	}
	if i != start {
		h.place(i, it)
	}
}
