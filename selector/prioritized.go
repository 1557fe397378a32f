package selector

import (
	"fmt"
	"math"
	"math/rand/v2"
)

var _ Selector = (*prioritized)(nil)

// MaxPriorityWeight is the largest weight (priority^exponent) a Prioritized
// selector accepts. It keeps the sum of up to 2^31 weights finite.
const MaxPriorityWeight = math.MaxFloat64 / (1 << 32)

// prioritized keeps the weights of its keys in the leaves of a sum tree.
//
// tree[leaves+i] is the weight of keys[i], for i < len(keys); the leaves
// past len(keys) are 0. Every inner node i in [1, leaves) is
// tree[2i]+tree[2i+1], recomputed from its children whenever one changes, so
// that no rounding error accumulates: a subtree of zero weights sums to
// exactly 0. tree[1] is the total weight; tree[0] is unused. leaves is a
// power of two (or 0 before the first insert).
type prioritized struct {
	exponent float64
	tree     []float64
	leaves   int
	keys     []uint64       // leaf -> key
	index    map[uint64]int // key -> leaf
	rng      *rand.Rand
}

// NewPrioritized returns a selector that picks a key with probability
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
	return &prioritized{exponent: exponent, index: make(map[uint64]int), rng: newRand(seed)}
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

// Insert adds key with the weight of priority.
func (p *prioritized) Insert(key uint64, priority float64) error {
	w, err := p.weight(priority)
	if err != nil {
		return err
	}
	if _, ok := p.index[key]; ok {
		return ErrExists
	}
	i := len(p.keys)
	if i == p.leaves {
		p.resize(max(2*p.leaves, 16))
	}
	p.keys = append(p.keys, key)
	p.index[key] = i
	p.set(i, w)
	return nil
}

// Update gives key the weight of priority.
func (p *prioritized) Update(key uint64, priority float64) error {
	w, err := p.weight(priority)
	if err != nil {
		return err
	}
	i, ok := p.index[key]
	if !ok {
		return ErrNotFound
	}
	p.set(i, w)
	return nil
}

// Delete removes key, moving the last leaf into its place.
func (p *prioritized) Delete(key uint64) error {
	i, ok := p.index[key]
	if !ok {
		return ErrNotFound
	}
	delete(p.index, key)
	last := len(p.keys) - 1
	if i != last {
		moved := p.keys[last]
		p.keys[i] = moved
		p.index[moved] = i
		p.set(i, p.tree[p.leaves+last])
	}
	p.set(last, 0)
	p.keys = p.keys[:last]
	return nil
}

// Sample picks a key with probability w/Σw, or uniformly when Σw is 0.
func (p *prioritized) Sample() (Choice, error) {
	n := len(p.keys)
	if n == 0 {
		return Choice{}, ErrEmpty
	}
	total := p.tree[1]
	if total == 0 {
		return Choice{Key: p.keys[p.rng.IntN(n)], Probability: 1 / float64(n)}, nil
	}
	i := p.find(p.rng.Float64() * total)
	return Choice{Key: p.keys[i], Probability: p.tree[p.leaves+i] / total}, nil
}

// find descends from the root to the leaf whose share of [0, total)
// holds t, and returns its index. The total must be > 0.
//
// Rounding may leave t outside the range of the node it reaches (t*total
// may round up to total, and the partial sums need not add up exactly), so
// the descent never follows a child of weight 0 when its sibling has
// weight: a node of positive weight always has a child of positive weight,
// hence the leaf returned has positive weight whatever t is.
func (p *prioritized) find(t float64) int {
	j := 1
	for j < p.leaves {
		j *= 2
		left, right := p.tree[j], p.tree[j+1]
		if left > 0 && (t < left || right == 0) {
			continue
		}
		t -= left
		j++
	}
	return j - p.leaves
}

// set stores weight w in leaf i and recomputes its ancestors.
func (p *prioritized) set(i int, w float64) {
	j := p.leaves + i
	p.tree[j] = w
	for j > 1 {
		j /= 2
		p.tree[j] = p.tree[2*j] + p.tree[2*j+1]
	}
}

// resize rebuilds the tree with the given number of leaves, in O(leaves).
func (p *prioritized) resize(leaves int) {
	tree := make([]float64, 2*leaves)
	copy(tree[leaves:], p.tree[p.leaves:p.leaves+len(p.keys)])
	for j := leaves - 1; j >= 1; j-- {
		tree[j] = tree[2*j] + tree[2*j+1]
	}
	p.tree, p.leaves = tree, leaves
}

// Len returns the number of keys held.
func (p *prioritized) Len() int { return len(p.keys) }

// Clear removes every key and releases the tree.
func (p *prioritized) Clear() {
	p.tree, p.leaves, p.keys = nil, 0, nil
	p.index = make(map[uint64]int)
}

// Spec returns the Prioritized spec with its exponent.
func (p *prioritized) Spec() Spec {
	return Spec{Kind: KindPrioritized, PriorityExponent: p.exponent}
}
