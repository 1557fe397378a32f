package selector

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// MaxSlot is the largest slot a built-in selector accepts: they index
// their slices with int32. Insert panics on a larger slot; Update and
// Delete report it as ErrNotFound.
const MaxSlot Slot = math.MaxInt32 - 1

// Markers stored in the int32 slices that built-in selectors index by slot.
const (
	nilSlot int32 = -1 // no slot: the end of a list, or an absent slot's position
	absent  int32 = -2 // a list link of a slot that is not present
)

// newRand returns the generator a randomized selector draws from.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// checkNotNaN rejects NaN, the one priority no selector can order.
func checkNotNaN(priority float64) error {
	if math.IsNaN(priority) {
		return fmt.Errorf("%w: priority must be a number, got %v", ErrInvalidPriority, priority)
	}
	return nil
}

// checkSlot panics on a slot above MaxSlot.
func checkSlot(slot Slot) {
	if slot > MaxSlot {
		panic(fmt.Sprintf("selector: slot %d exceeds MaxSlot (%d)", slot, MaxSlot))
	}
}

// growLen returns the length a slice indexed by slot grows to so as to
// cover slot: at least double its current length n, but no more than
// MaxSlot+1.
func growLen(n int, slot Slot) int {
	return max(min(2*n, int(MaxSlot)+1), int(slot)+1, 16)
}

// growPositions returns pos grown to cover slot, the new entries set to
// nilSlot (absent).
func growPositions(pos []int32, slot Slot) []int32 {
	grown := make([]int32, growLen(len(pos), slot))
	n := copy(grown, pos)
	for i := n; i < len(grown); i++ {
		grown[i] = nilSlot
	}
	return grown
}

// position returns pos[slot], or nilSlot when slot is beyond pos.
func position(pos []int32, slot Slot) int32 {
	if int(slot) >= len(pos) {
		return nilSlot
	}
	return pos[slot]
}
