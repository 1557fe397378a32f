package selector

var _ Selector = (*fifo)(nil)

// fifo picks the oldest inserted slot.
type fifo struct{ list }

// NewFIFO returns a selector that picks the oldest inserted slot still
// present, with probability 1. Priorities and updates do not move slots.
func NewFIFO() Selector { return &fifo{newList()} }

// Sample returns the oldest slot.
func (f *fifo) Sample() (Choice, error) { return f.pick(f.head) }

// Spec returns the FIFO spec.
func (f *fifo) Spec() Spec { return Spec{Kind: KindFIFO} }

// Oldest calls f with each of the n oldest slots, oldest first (fewer if
// fewer are held): the slots a FIFO remover takes next.
func (f *fifo) Oldest(n int, fn func(Slot)) {
	for s := f.head; s != nilSlot && n > 0; s, n = f.links[s].next, n-1 {
		fn(Slot(s))
	}
}
