package selector

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// maxSlots bounds the number of keys a slab-backed selector (FIFO, LIFO,
// MinHeap, MaxHeap) can hold, as it indexes its slabs with int32.
const maxSlots = math.MaxInt32

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
