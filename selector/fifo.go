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
