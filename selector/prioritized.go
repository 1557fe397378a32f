package selector

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
)

var _ Selector = (*prioritized)(nil)

// MaxPriorityWeight is the largest weight (priority^exponent) a Prioritized
// selector accepts. It keeps the sum of up to 2^31 weights finite.
const MaxPriorityWeight = math.MaxFloat64 / (1 << 32)

// fanout is the number of children of an inner node of the sum tree: 8
// float64 weights fill one 64-byte cache line, so that a descent from the
// root to a leaf reads one line per level, and a tree of 2^24 leaves has 8
// levels above its leaves rather than 24.
const fanout = 8

// prioritized keeps the weights of its slots in the leaves of a sum tree
// whose leaf index is the slot.
//
// levels[0] holds the leaves: levels[0][s] is the weight of slot s, or 0
// when s is not present; its length, the capacity, is a power of two (or 0
// before the first insert). Each following level has one node per fanout
// nodes of the level below: levels[k][i] = sum(levels[k-1][fanout*i:][:fanout]),
// recomputed from the children whenever one changes, so that no rounding
// error accumulates: a subtree of zero weights sums to exactly 0. Levels
// are padded with zeros to a multiple of fanout. The last level holds one
// node, the total weight.
//
// present lists the present slots densely, for Len and for the uniform
// draw when every weight is 0.
type prioritized struct {
	exponent float64
	levels   [][]float64
	present  dense
	rng      *rand.Rand
}

// NewPrioritized returns a selector that picks a slot with probability
// w/Σw, where w = priority^exponent (and w = 0 when the priority is 0, even
// when exponent is 0). When every weight is 0 it picks uniformly. seed seeds
// its generator.
//
// NewPrioritized panics if exponent is negative, NaN or infinite; New
// reports such a Spec as an error.
func NewPrioritized(exponent float64, seed uint64) Selector {
	if err := checkExponent(exponent); err != nil {
		panic(err)
	}
	return &prioritized{exponent: exponent, rng: newRand(seed)}
}

func checkExponent(exponent float64) error {
	if math.IsNaN(exponent) || math.IsInf(exponent, 0) || exponent < 0 {
		return fmt.Errorf("selector: priority exponent must be finite and >= 0, got %v", exponent)
	}
	return nil
}

// weight returns the weight of priority, or ErrInvalidPriority.
func (p *prioritized) weight(priority float64) (float64, error) {
	if math.IsNaN(priority) || math.IsInf(priority, 1) || priority < 0 {
		return 0, fmt.Errorf("%w: priority must be a finite number >= 0, got %v", ErrInvalidPriority, priority)
	}
	if priority == 0 {
		return 0, nil
	}
	w := math.Pow(priority, p.exponent)
	if w > MaxPriorityWeight {
		return 0, fmt.Errorf("%w: priority %v raised to %v exceeds the maximum weight %v",
			ErrInvalidPriority, priority, p.exponent, MaxPriorityWeight)
	}
	return w, nil
}

// CheckPriority rejects NaN, negative and infinite priorities, and those
// whose weight would exceed MaxPriorityWeight.
func (p *prioritized) CheckPriority(priority float64) error {
	_, err := p.weight(priority)
	return err
}

// Insert adds slot with the weight of priority.
func (p *prioritized) Insert(slot Slot, priority float64) error {
	w, err := p.weight(priority)
	if err != nil {
		return err
	}
	checkSlot(slot)
	if p.present.has(slot) {
		return ErrExists
	}
	if int(slot) >= p.capacity() {
		p.grow(slot)
	}
	p.present.add(slot)
	p.set(slot, w)
	return nil
}

// Update gives slot the weight of priority.
func (p *prioritized) Update(slot Slot, priority float64) error {
	w, err := p.weight(priority)
	if err != nil {
		return err
	}
	if !p.present.has(slot) {
		return ErrNotFound
	}
	p.set(slot, w)
	return nil
}

// Delete removes slot: its leaf goes back to 0.
func (p *prioritized) Delete(slot Slot) error {
	if !p.present.remove(slot) {
		return ErrNotFound
	}
	p.set(slot, 0)
	return nil
}

// Sample picks a slot with probability w/Σw, or uniformly when Σw is 0.
func (p *prioritized) Sample() (Choice, error) {
	if len(p.present.slots) == 0 {
		return Choice{}, ErrEmpty
	}
	total := p.total()
	if total == 0 {
		return p.present.draw(p.rng), nil
	}
	i := p.find(p.rng.Float64() * total)
	return Choice{Slot: Slot(i), Probability: p.levels[0][i] / total}, nil
}

// capacity returns the number of leaves.
func (p *prioritized) capacity() int {
	if len(p.levels) == 0 {
		return 0
	}
	return len(p.levels[0])
}

// total returns the total weight. The tree must have leaves.
func (p *prioritized) total() float64 { return p.levels[len(p.levels)-1][0] }

// find descends from the root to the leaf whose share of [0, total)
// holds t, and returns its index. The total must be > 0.
//
// Rounding may leave t outside the range of the node it reaches (t*total
// may round up to total, and the partial sums need not add up exactly), so
// the descent never follows a child of weight 0: it takes the first child
// of positive weight whose share holds t, or else the last child of
// positive weight. A node of positive weight always has a child of positive
// weight, hence the leaf returned has positive weight whatever t is.
func (p *prioritized) find(t float64) int {
	i := 0
	for k := len(p.levels) - 2; k >= 0; k-- {
		base := i * fanout
		pick := 0
		for j, w := range (*[fanout]float64)(p.levels[k][base:]) {
			if w == 0 {
				continue
			}
			pick = j
			if t < w {
				break
			}
			t -= w
		}
		i = base + pick
	}
	return i
}

// sum returns the sum of a node's children, always added in the same
// order (pairwise, which keeps the chain of dependent additions short).
func sum(c *[fanout]float64) float64 {
	return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]))
}

// set stores weight w in the leaf of slot and recomputes its ancestors.
func (p *prioritized) set(slot Slot, w float64) {
	i := int(slot)
	p.levels[0][i] = w
	for k := 1; k < len(p.levels); k++ {
		i /= fanout
		p.levels[k][i] = sum((*[fanout]float64)(p.levels[k-1][i*fanout:]))
	}
}

// grow rebuilds the tree with enough leaves for slot, at least doubling
// them, in O(leaves).
func (p *prioritized) grow(slot Slot) {
	leaves := 1 << bits.Len(uint(growLen(p.capacity(), slot)-1))
	levels := [][]float64{make([]float64, leaves)}
	if len(p.levels) > 0 {
		copy(levels[0], p.levels[0])
	}
	for n := leaves; n > 1; {
		below := levels[len(levels)-1]
		n = (n + fanout - 1) / fanout
		size := n
		if n > 1 {
			size = (n + fanout - 1) / fanout * fanout
		}
		level := make([]float64, size)
		for i := range n {
			level[i] = sum((*[fanout]float64)(below[i*fanout:]))
		}
		levels = append(levels, level)
	}
	p.levels = levels
}

// Len returns the number of slots held.
func (p *prioritized) Len() int { return len(p.present.slots) }

// Clear removes every slot and releases the tree.
func (p *prioritized) Clear() {
	p.levels, p.present = nil, dense{}
}

// Spec returns the Prioritized spec with its exponent.
func (p *prioritized) Spec() Spec {
	return Spec{Kind: KindPrioritized, PriorityExponent: p.exponent}
}
