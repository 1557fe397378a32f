package selector

import "math/rand/v2"

var _ Selector = (*uniform)(nil)

// uniform keeps its keys dense in a slice so that a draw is one index.
type uniform struct {
	keys  []uint64
	index map[uint64]int // key -> position in keys
	rng   *rand.Rand
}

// NewUniform returns a selector that picks every present key with
// probability 1/N. Priorities are ignored. seed seeds its generator.
func NewUniform(seed uint64) Selector {
	return &uniform{index: make(map[uint64]int), rng: newRand(seed)}
}

// CheckPriority rejects NaN; the priority is otherwise ignored.
func (u *uniform) CheckPriority(priority float64) error { return checkNotNaN(priority) }

// Insert adds key.
func (u *uniform) Insert(key uint64, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	if _, ok := u.index[key]; ok {
		return ErrExists
	}
	u.index[key] = len(u.keys)
	u.keys = append(u.keys, key)
	return nil
}

// Update checks that key is present.
func (u *uniform) Update(key uint64, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	if _, ok := u.index[key]; !ok {
		return ErrNotFound
	}
	return nil
}

// Delete removes key, moving the last key into its place.
func (u *uniform) Delete(key uint64) error {
	i, ok := u.index[key]
	if !ok {
		return ErrNotFound
	}
	delete(u.index, key)
	last := len(u.keys) - 1
	if i != last {
		moved := u.keys[last]
		u.keys[i] = moved
		u.index[moved] = i
	}
	u.keys = u.keys[:last]
	return nil
}

// Sample returns a uniformly random key.
func (u *uniform) Sample() (Choice, error) {
	n := len(u.keys)
	if n == 0 {
		return Choice{}, ErrEmpty
	}
	return Choice{Key: u.keys[u.rng.IntN(n)], Probability: 1 / float64(n)}, nil
}

// Len returns the number of keys held.
func (u *uniform) Len() int { return len(u.keys) }

// Clear removes every key and releases their memory.
func (u *uniform) Clear() {
	u.keys = nil
	u.index = make(map[uint64]int)
}

// Spec returns the Uniform spec.
func (u *uniform) Spec() Spec { return Spec{Kind: KindUniform} }
