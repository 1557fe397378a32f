package selector

import "math/rand/v2"

var _ Selector = (*uniform)(nil)

// dense is a set of slots kept dense in a slice, so that a uniform draw is
// one index. pos follows each slot's position in slots; deleting moves the
// last slot into the hole. Every operation is O(1), amortized over the
// growth of pos.
type dense struct {
	slots []Slot
	pos   []int32 // slot -> position in slots, or nilSlot when absent
}

// has reports whether slot is present.
func (d *dense) has(slot Slot) bool { return position(d.pos, slot) != nilSlot }

// add appends slot, which must not be present, growing pos to cover it.
func (d *dense) add(slot Slot) {
	if int(slot) >= len(d.pos) {
		d.pos = growPositions(d.pos, slot)
	}
	d.pos[slot] = int32(len(d.slots))
	d.slots = append(d.slots, slot)
}

// remove removes slot, moving the last slot into its place, and reports
// whether it was present.
func (d *dense) remove(slot Slot) bool {
	i := position(d.pos, slot)
	if i == nilSlot {
		return false
	}
	d.pos[slot] = nilSlot
	last := len(d.slots) - 1
	if int(i) != last {
		moved := d.slots[last]
		d.slots[i] = moved
		d.pos[moved] = i
	}
	d.slots = d.slots[:last]
	return true
}

// draw returns a uniformly random slot of the non-empty set, and 1/N.
func (d *dense) draw(rng *rand.Rand) Choice {
	n := len(d.slots)
	return Choice{Slot: d.slots[rng.IntN(n)], Probability: 1 / float64(n)}
}

// uniform keeps its slots dense so that a draw is one index.
type uniform struct {
	set dense
	rng *rand.Rand
}

// NewUniform returns a selector that picks every present slot with
// probability 1/N. Priorities are ignored. seed seeds its generator.
func NewUniform(seed uint64) Selector {
	return &uniform{rng: newRand(seed)}
}

// CheckPriority rejects NaN; the priority is otherwise ignored.
func (u *uniform) CheckPriority(priority float64) error { return checkNotNaN(priority) }

// Insert adds slot.
func (u *uniform) Insert(slot Slot, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	checkSlot(slot)
	if u.set.has(slot) {
		return ErrExists
	}
	u.set.add(slot)
	return nil
}

// Update checks that slot is present.
func (u *uniform) Update(slot Slot, priority float64) error {
	if err := checkNotNaN(priority); err != nil {
		return err
	}
	if !u.set.has(slot) {
		return ErrNotFound
	}
	return nil
}

// Delete removes slot.
func (u *uniform) Delete(slot Slot) error {
	if !u.set.remove(slot) {
		return ErrNotFound
	}
	return nil
}

// Sample returns a uniformly random slot.
func (u *uniform) Sample() (Choice, error) {
	if len(u.set.slots) == 0 {
		return Choice{}, ErrEmpty
	}
	return u.set.draw(u.rng), nil
}

// Len returns the number of slots held.
func (u *uniform) Len() int { return len(u.set.slots) }

// Clear removes every slot and releases their memory.
func (u *uniform) Clear() { u.set = dense{} }

// Spec returns the Uniform spec.
func (u *uniform) Spec() Spec { return Spec{Kind: KindUniform} }
