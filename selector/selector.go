// Package selector holds the strategies a table uses to pick items: as its
// sampler (which item a sample returns) and as its remover (which item is
// evicted when the table is full).
//
// reverie ships Reverb's six: FIFO, LIFO, Uniform, Prioritized, MinHeap and
// MaxHeap. Go users may plug in their own by implementing Selector and naming
// a factory in server.Config.Selectors.
//
// Selectors are plain data structures and are not safe for concurrent use:
// the table that owns them holds its lock around every call.
package selector

import (
	"errors"
	"fmt"
)

// Errors returned by selectors. Custom selectors should return (or wrap)
// the same ones.
var (
	ErrNotFound        = errors.New("selector: slot not found")
	ErrExists          = errors.New("selector: slot already present")
	ErrEmpty           = errors.New("selector: empty")
	ErrInvalidPriority = errors.New("selector: invalid priority")
)

// Kind names a selector strategy.
type Kind int

// The built-in kinds. KindCustom names a selector supplied by the embedding
// program.
const (
	KindUnset Kind = iota
	KindFIFO
	KindLIFO
	KindUniform
	KindPrioritized
	KindMinHeap
	KindMaxHeap
	KindCustom
)

var kindNames = [...]string{"unset", "fifo", "lifo", "uniform", "prioritized", "min_heap", "max_heap", "custom"}

// String returns the kind's name, as ParseKind accepts it.
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// ParseKind returns the kind named s ("fifo", "lifo", "uniform",
// "prioritized", "min_heap", "max_heap").
func ParseKind(s string) (Kind, error) {
	for k, n := range kindNames {
		if n == s && Kind(k) != KindUnset && Kind(k) != KindCustom {
			return Kind(k), nil
		}
	}
	return KindUnset, fmt.Errorf("selector: unknown kind %q (want fifo, lifo, uniform, prioritized, min_heap or max_heap)", s)
}

// Spec describes a selector: its kind and parameters.
type Spec struct {
	Kind Kind
	// PriorityExponent is the exponent applied to priorities by KindPrioritized.
	// Zero makes every non-zero priority equally likely.
	PriorityExponent float64
	// Name names the factory of a KindCustom selector.
	Name string
}

// Deterministic reports whether the kind picks without randomness, as
// KeyDistributionOptions.is_deterministic reports it.
func (s Spec) Deterministic() bool {
	switch s.Kind {
	case KindFIFO, KindLIFO, KindMinHeap, KindMaxHeap:
		return true
	}
	return false
}

// Slot identifies an item inside a table. The table assigns slots densely:
// a slot is unique among the items the table holds, is reused after its
// item leaves, and stays below the largest number of items the table has
// held at once. Selectors index plain slices by slot, so they need no maps
// and do no hashing.
type Slot = uint32

// Choice is one pick of a selector.
type Choice struct {
	Slot Slot
	// Probability is the probability with which Slot was picked.
	Probability float64
}

// Selector picks items. Every item the table holds is inserted exactly once
// and deleted exactly once; priorities change only through Update. Slots
// are opaque to selectors apart from being small dense integers.
type Selector interface {
	// CheckPriority reports ErrInvalidPriority (wrapped, naming the value)
	// when the selector cannot hold an item with this priority. The table
	// calls it before any change, so a rejected item changes nothing.
	CheckPriority(priority float64) error
	// Insert adds a slot that is not present (else ErrExists).
	Insert(slot Slot, priority float64) error
	// Update changes the priority of a present slot (else ErrNotFound).
	Update(slot Slot, priority float64) error
	// Delete removes a present slot (else ErrNotFound).
	Delete(slot Slot) error
	// Sample picks a slot without removing it (ErrEmpty when empty).
	Sample() (Choice, error)
	// Len is the number of slots held.
	Len() int
	// Clear removes every slot.
	Clear()
	// Spec describes the selector.
	Spec() Spec
}

// Orderer is implemented by selectors whose coming choices are known in
// advance (FIFO): a table reads ahead the items its remover will take.
type Orderer interface {
	// Oldest calls fn with each of the n slots Sample would return next,
	// were each removed in turn (fewer if fewer are held).
	Oldest(n int, fn func(Slot))
}

// Factory makes a new, empty selector. seed seeds any randomness, so that a
// table can be made reproducible in tests.
type Factory func(seed uint64) Selector
