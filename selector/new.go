package selector

import (
	"errors"
	"fmt"
)

// New returns a new, empty built-in selector as spec describes. seed seeds
// the randomized kinds (Uniform and Prioritized). KindCustom selectors are
// made by their Factory, so New rejects them, as it rejects KindUnset and a
// Prioritized exponent that is negative, NaN or infinite.
func New(spec Spec, seed uint64) (Selector, error) {
	switch spec.Kind {
	case KindFIFO:
		return NewFIFO(), nil
	case KindLIFO:
		return NewLIFO(), nil
	case KindUniform:
		return NewUniform(seed), nil
	case KindPrioritized:
		if err := checkExponent(spec.PriorityExponent); err != nil {
			return nil, err
		}
		return NewPrioritized(spec.PriorityExponent, seed), nil
	case KindMinHeap:
		return NewHeap(true), nil
	case KindMaxHeap:
		return NewHeap(false), nil
	case KindUnset:
		return nil, errors.New("selector: no kind set")
	case KindCustom:
		return nil, fmt.Errorf("selector: custom selector %q is made by its Factory, not New", spec.Name)
	}
	return nil, fmt.Errorf("selector: unknown kind %v", spec.Kind)
}
