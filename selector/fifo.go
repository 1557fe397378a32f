package selector

var _ Selector = (*fifo)(nil)

// fifo picks the oldest inserted key.
type fifo struct{ list }

// NewFIFO returns a selector that picks the oldest inserted key still
// present, with probability 1. Priorities and updates do not move keys.
func NewFIFO() Selector { return &fifo{newList()} }

// Sample returns the oldest key.
func (f *fifo) Sample() (Choice, error) { return f.pick(f.head) }

// Spec returns the FIFO spec.
func (f *fifo) Spec() Spec { return Spec{Kind: KindFIFO} }
