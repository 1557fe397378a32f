package selector

var _ Selector = (*lifo)(nil)

// lifo picks the newest inserted slot.
type lifo struct{ list }

// NewLIFO returns a selector that picks the newest inserted slot still
// present, with probability 1. Priorities and updates do not move slots.
func NewLIFO() Selector { return &lifo{newList()} }

// Sample returns the newest slot.
func (l *lifo) Sample() (Choice, error) { return l.pick(l.tail) }

// Spec returns the LIFO spec.
func (l *lifo) Spec() Spec { return Spec{Kind: KindLIFO} }
