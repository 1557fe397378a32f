package selector

var _ Selector = (*priorityHeap)(nil)

// heapItem is one entry of a priorityHeap. Items are ordered by
// (order, seq).
type heapItem struct {
	order float64 // the priority, negated in a max-heap
	seq   uint64  // when the key was last inserted or updated
	key   uint64
	slot  int32 // the key's slot in priorityHeap.pos
}

// priorityHeap is a binary heap of items in a slice. Each key owns a slot
// in pos, which follows the key's position in items, so that sifting
// updates an int32 slab rather than a map; free slots are chained through
// pos.
type priorityHeap struct {
	items []heapItem
	pos   []int32          // slot -> position in items, or next free slot
	free  int32            // first free slot, or nilNode
	index map[uint64]int32 // key -> slot
	seq   uint64           // counts inserts and updates
	max   bool
}

// NewHeap returns a selector that picks the key of lowest priority (of
// highest, when minHeap is false) with probability 1. Of keys with equal
// priorities it picks the one least recently inserted or updated.
func NewHeap(minHeap bool) Selector {
	return &priorityHeap{index: make(map[uint64]int32), free: nilNode, max: !minHeap}
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

// Insert adds key with priority.
func (h *priorityHeap) Insert(key uint64, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	if _, ok := h.index[key]; ok {
		return ErrExists
	}
	slot := h.free
	if slot != nilNode {
		h.free = h.pos[slot]
	} else {
		if len(h.pos) == maxSlots {
			panic("selector: too many keys")
		}
		slot = int32(len(h.pos))
		h.pos = append(h.pos, 0)
	}
	h.index[key] = slot
	h.seq++
	h.items = append(h.items, heapItem{order: h.order(priority), seq: h.seq, key: key, slot: slot})
	i := len(h.items) - 1
	h.pos[slot] = int32(i)
	h.up(i)
	return nil
}

// Update gives key a new priority, placing it after the keys of equal
// priority.
func (h *priorityHeap) Update(key uint64, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	slot, ok := h.index[key]
	if !ok {
		return ErrNotFound
	}
	i := int(h.pos[slot])
	h.seq++
	h.items[i].order, h.items[i].seq = h.order(priority), h.seq
	h.fix(i)
	return nil
}

// Delete removes key, moving the last item into its place.
func (h *priorityHeap) Delete(key uint64) error {
	slot, ok := h.index[key]
	if !ok {
		return ErrNotFound
	}
	delete(h.index, key)
	i, last := int(h.pos[slot]), len(h.items)-1
	if i != last {
		h.place(i, h.items[last])
	}
	h.items = h.items[:last]
	if i != last {
		h.fix(i)
	}
	h.pos[slot], h.free = h.free, slot
	return nil
}

// Sample returns the key at the top of the heap.
func (h *priorityHeap) Sample() (Choice, error) {
	if len(h.items) == 0 {
		return Choice{}, ErrEmpty
	}
	return Choice{Key: h.items[0].key, Probability: 1}, nil
}

// Len returns the number of keys held.
func (h *priorityHeap) Len() int { return len(h.items) }

// Clear removes every key and releases their memory. The insert counter
// carries on.
func (h *priorityHeap) Clear() {
	h.items, h.pos, h.free = nil, nil, nilNode
	h.index = make(map[uint64]int32)
}

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
		parent := (i - 1) / 2
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
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && before(h.items[r], h.items[c]) {
			c = r
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
