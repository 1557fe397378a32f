package selector

// link holds a slot's neighbours in a list: the slot inserted just before
// it and the one just after, or nilSlot. prev is absent when the slot is
// not in the list.
type link struct {
	prev, next int32
}

// list holds slots in insertion order, as a doubly linked list whose nodes
// are the slots themselves: links[s] links slot s. It makes no allocation
// per slot, holds no pointer for the garbage collector to scan and does no
// hashing. Every operation is O(1), amortized over the growth of links.
//
// list implements every Selector method but Sample and Spec, which fifo and
// lifo add.
type list struct {
	links      []link // slot -> its links; {absent, absent} when not present
	head, tail int32  // oldest and newest slot, or nilSlot
	n          int    // number of slots present
}

func newList() list { return list{head: nilSlot, tail: nilSlot} }

// CheckPriority rejects NaN; the priority is otherwise ignored.
func (l *list) CheckPriority(priority float64) error { return checkNotNaN(priority) }

// has reports whether slot is present.
func (l *list) has(slot Slot) bool {
	return int(slot) < len(l.links) && l.links[slot].prev != absent
}

// Insert appends slot as the newest slot.
func (l *list) Insert(slot Slot, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	checkSlot(slot)
	if int(slot) >= len(l.links) {
		l.grow(slot)
	} else if l.links[slot].prev != absent {
		return ErrExists
	}
	s := int32(slot)
	l.links[s] = link{prev: l.tail, next: nilSlot}
	if l.tail != nilSlot {
		l.links[l.tail].next = s
	} else {
		l.head = s
	}
	l.tail = s
	l.n++
	return nil
}

// grow extends links to cover slot.
func (l *list) grow(slot Slot) {
	grown := make([]link, growLen(len(l.links), slot))
	n := copy(grown, l.links)
	for i := n; i < len(grown); i++ {
		grown[i] = link{prev: absent, next: absent}
	}
	l.links = grown
}

// Update checks that slot is present; it does not move it.
func (l *list) Update(slot Slot, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	if !l.has(slot) {
		return ErrNotFound
	}
	return nil
}

// Delete unlinks slot.
func (l *list) Delete(slot Slot) error {
	if !l.has(slot) {
		return ErrNotFound
	}
	n := l.links[slot]
	if n.prev != nilSlot {
		l.links[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nilSlot {
		l.links[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
	l.links[slot] = link{prev: absent, next: absent}
	l.n--
	return nil
}

// Len returns the number of slots held.
func (l *list) Len() int { return l.n }

// Clear removes every slot and releases the links.
func (l *list) Clear() { *l = newList() }

// pick returns slot s, the head or the tail, as a certain choice.
func (l *list) pick(s int32) (Choice, error) {
	if s == nilSlot {
		return Choice{}, ErrEmpty
	}
	return Choice{Slot: Slot(s), Probability: 1}, nil
}
