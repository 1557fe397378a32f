package selector

// nilNode marks the absence of a node in a list.
const nilNode = -1

// listNode is one slot of a list's slab. A free slot links the free list
// through next.
type listNode struct {
	key        uint64
	prev, next int32
}

// list holds keys in insertion order, as a doubly linked list threaded
// through a slab of nodes: it makes no allocation per key and holds no
// pointer for the garbage collector to scan. Every operation is O(1).
//
// list implements every Selector method but Sample and Spec, which fifo and
// lifo add.
type list struct {
	nodes      []listNode
	index      map[uint64]int32 // key -> node
	head, tail int32            // oldest and newest node, or nilNode
	free       int32            // first free node, or nilNode
}

func newList() list {
	return list{index: make(map[uint64]int32), head: nilNode, tail: nilNode, free: nilNode}
}

// CheckPriority rejects NaN; the priority is otherwise ignored.
func (l *list) CheckPriority(priority float64) error { return checkNotNaN(priority) }

// Insert appends key as the newest key.
func (l *list) Insert(key uint64, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	if _, ok := l.index[key]; ok {
		return ErrExists
	}
	i := l.free
	if i != nilNode {
		l.free = l.nodes[i].next
	} else {
		if len(l.nodes) == maxSlots {
			panic("selector: too many keys")
		}
		i = int32(len(l.nodes))
		l.nodes = append(l.nodes, listNode{})
	}
	l.nodes[i] = listNode{key: key, prev: l.tail, next: nilNode}
	if l.tail != nilNode {
		l.nodes[l.tail].next = i
	} else {
		l.head = i
	}
	l.tail = i
	l.index[key] = i
	return nil
}

// Update checks that key is present; it does not move it.
func (l *list) Update(key uint64, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	if _, ok := l.index[key]; !ok {
		return ErrNotFound
	}
	return nil
}

// Delete unlinks key.
func (l *list) Delete(key uint64) error {
	i, ok := l.index[key]
	if !ok {
		return ErrNotFound
	}
	delete(l.index, key)
	if len(l.index) == 0 {
		// Start the slab afresh, keeping its memory.
		l.nodes, l.head, l.tail, l.free = l.nodes[:0], nilNode, nilNode, nilNode
		return nil
	}
	n := l.nodes[i]
	if n.prev != nilNode {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nilNode {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
	l.nodes[i] = listNode{prev: nilNode, next: l.free}
	l.free = i
	return nil
}

// Len returns the number of keys held.
func (l *list) Len() int { return len(l.index) }

// Clear removes every key and releases the slab.
func (l *list) Clear() { *l = newList() }

// pick returns node i, the head or the tail, as a certain choice.
func (l *list) pick(i int32) (Choice, error) {
	if i == nilNode {
		return Choice{}, ErrEmpty
	}
	return Choice{Key: l.nodes[i].key, Probability: 1}, nil
}
