package table

// waitQueue is a FIFO of waiters. Removal from the middle (a waiter giving
// up) is O(n); it is rare next to push and pop.
type waitQueue[T comparable] struct {
	items []T
	head  int
}

func (q *waitQueue[T]) len() int { return len(q.items) - q.head }

func (q *waitQueue[T]) push(w T) { q.items = append(q.items, w) }

func (q *waitQueue[T]) peek() (T, bool) {
	if q.head == len(q.items) {
		var zero T
		return zero, false
	}
	return q.items[q.head], true
}

func (q *waitQueue[T]) pop() (T, bool) {
	w, ok := q.peek()
	if !ok {
		return w, false
	}
	var zero T
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 64 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return w, true
}

// remove takes w out of the queue and reports whether it was there.
func (q *waitQueue[T]) remove(w T) bool {
	for i := q.head; i < len(q.items); i++ {
		if q.items[i] == w {
			copy(q.items[i:], q.items[i+1:])
			var zero T
			q.items[len(q.items)-1] = zero
			q.items = q.items[:len(q.items)-1]
			return true
		}
	}
	return false
}
