package selector_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// modelItem is what the reference model knows of a slot.
type modelItem struct {
	slot     selector.Slot
	priority float64
	inserted uint64 // order of insertion
	touched  uint64 // order of the last insert or update
}

// model is a trivially correct reference for every built-in kind: it keeps
// the present slots in a slice, in no particular order, and scans it to
// answer.
type model struct {
	spec  selector.Spec
	items []modelItem
	seq   uint64
}

// find returns the index of slot in m.items, or -1.
func (m *model) find(slot selector.Slot) int {
	return slices.IndexFunc(m.items, func(it modelItem) bool { return it.slot == slot })
}

func (m *model) weight(p float64) float64 {
	if p == 0 {
		return 0
	}
	return math.Pow(p, m.spec.PriorityExponent)
}

// valid reports whether the selector must accept priority p.
func (m *model) valid(p float64) bool {
	if math.IsNaN(p) {
		return false
	}
	if m.spec.Kind == selector.KindPrioritized {
		return p >= 0 && !math.IsInf(p, 1) && m.weight(p) <= selector.MaxPriorityWeight
	}
	return true
}

// insert applies Insert(slot, p) to the model and returns the error the
// selector must return.
func (m *model) insert(slot selector.Slot, p float64) error {
	switch {
	case !m.valid(p):
		return selector.ErrInvalidPriority
	case m.find(slot) >= 0:
		return selector.ErrExists
	}
	m.seq++
	m.items = append(m.items, modelItem{slot: slot, priority: p, inserted: m.seq, touched: m.seq})
	return nil
}

// update applies Update(slot, p) to the model and returns the error the
// selector must return.
func (m *model) update(slot selector.Slot, p float64) error {
	i := m.find(slot)
	switch {
	case !m.valid(p):
		return selector.ErrInvalidPriority
	case i < 0:
		return selector.ErrNotFound
	}
	m.seq++
	m.items[i].priority, m.items[i].touched = p, m.seq
	return nil
}

// delete applies Delete(slot) to the model and returns the error the
// selector must return.
func (m *model) delete(slot selector.Slot) error {
	i := m.find(slot)
	if i < 0 {
		return selector.ErrNotFound
	}
	m.items = slices.Delete(m.items, i, i+1)
	return nil
}

// best returns the item a deterministic kind must pick.
func (m *model) best() (modelItem, bool) {
	var best modelItem
	found := false
	for _, it := range m.items {
		better := false
		switch m.spec.Kind {
		case selector.KindFIFO:
			better = it.inserted < best.inserted
		case selector.KindLIFO:
			better = it.inserted > best.inserted
		case selector.KindMinHeap:
			better = it.priority < best.priority || it.priority == best.priority && it.touched < best.touched
		case selector.KindMaxHeap:
			better = it.priority > best.priority || it.priority == best.priority && it.touched < best.touched
		}
		if !found || better {
			best, found = it, true
		}
	}
	return best, found
}

// checkSample checks one Sample of s against the model.
func (m *model) checkSample(t *testing.T, s selector.Selector) {
	t.Helper()
	c, err := s.Sample()
	n := len(m.items)
	if n == 0 {
		if !errors.Is(err, selector.ErrEmpty) {
			t.Fatalf("Sample() = %+v, %v; want ErrEmpty", c, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Sample(): %v", err)
	}
	i := m.find(c.Slot)
	if i < 0 {
		t.Fatalf("Sample() = %+v, not a present slot", c)
	}
	it := m.items[i]
	switch m.spec.Kind {
	case selector.KindUniform:
		if c.Probability != 1/float64(n) {
			t.Fatalf("Sample() = %+v, want probability 1/%d", c, n)
		}
	case selector.KindPrioritized:
		total := 0.0
		for _, it := range m.items {
			total += m.weight(it.priority)
		}
		want := 1 / float64(n)
		if total > 0 {
			w := m.weight(it.priority)
			if w == 0 {
				t.Fatalf("Sample() = %+v, a slot of weight 0 while the total is %v", c, total)
			}
			want = w / total
		}
		if math.Abs(c.Probability-want) > 1e-9*want {
			t.Fatalf("Sample() = %+v, want probability %v", c, want)
		}
	default:
		if best, _ := m.best(); c.Slot != best.slot || c.Probability != 1 {
			t.Fatalf("Sample() = %+v, want slot %d (%+v) with probability 1", c, best.slot, best)
		}
	}
}

// randomPriority draws priorities that collide often, including 0, and
// now and then invalid or extreme ones.
func randomPriority(rng *rand.Rand) float64 {
	switch r := rng.IntN(40); {
	case r == 0:
		return math.NaN()
	case r == 1:
		return math.Inf(1)
	case r == 2:
		return math.Inf(-1)
	case r == 3:
		return -rng.Float64()
	case r == 4:
		return 1e300
	case r < 15:
		return 0
	case r < 30:
		return float64(rng.IntN(4))
	}
	return rng.Float64() * 10
}

// allocator hands out slots as a table does: the most recently freed slot
// first, else the next never used one, so that slots stay below the peak
// number of items held.
type allocator struct {
	free []selector.Slot
	next selector.Slot
}

func (a *allocator) alloc() selector.Slot {
	if n := len(a.free); n > 0 {
		s := a.free[n-1]
		a.free = a.free[:n-1]
		return s
	}
	a.next++
	return a.next - 1
}

func (a *allocator) release(s selector.Slot) { a.free = append(a.free, s) }

// sparseSlots are the slots of the sparse workload: small ones, ones at
// the edges of powers of two and far ones, so that the selectors' slices
// grow in jumps and keep long runs of absent slots.
var sparseSlots = func() []selector.Slot {
	var s []selector.Slot
	for i := range selector.Slot(40) {
		s = append(s, i)
	}
	return append(s, 63, 64, 65, 127, 128, 1000, 4095, 4096, 4097, 65_535, 65_536, 1_000_000)
}()

// consistencySpecs lists the built-in kinds and further exponents.
func consistencySpecs() []kindCase {
	specs := append([]kindCase{}, builtins...)
	for _, e := range []float64{0, 0.5, 2} {
		specs = append(specs, kindCase{
			fmt.Sprintf("prioritized_%v", e),
			selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: e},
		})
	}
	return specs
}

// checkStep compares the outcome of one operation and then Len and Sample.
func checkStep(t *testing.T, s selector.Selector, m *model, step int, op string, slot selector.Slot, prio float64, err, want error) {
	t.Helper()
	if !errors.Is(err, want) || (err == nil) != (want == nil) {
		t.Fatalf("step %d: %s(%d, %v) = %v, want %v", step, op, slot, prio, err, want)
	}
	if s.Len() != len(m.items) {
		t.Fatalf("step %d: Len() = %d, want %d", step, s.Len(), len(m.items))
	}
	m.checkSample(t, s)
}

// TestConsistencyTable applies a long random sequence of operations to
// every built-in selector and to the model, with slots handed out as a
// table does (freed slots are reused at once), checking the errors, Len and
// Sample after each. The number of items wanders up and down, so slots are
// reused at every depth of the free list. Insert of a present slot, and
// Update and Delete of freed, never used and far slots, must fail.
func TestConsistencyTable(t *testing.T) {
	for _, k := range consistencySpecs() {
		t.Run(k.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(99, 100))
			s := mustNew(t, k.spec, 7)
			m := &model{spec: k.spec}
			var a allocator
			// absentSlot returns a slot that is not present.
			absentSlot := func() selector.Slot {
				switch r := rng.IntN(4); {
				case r == 0 && len(a.free) > 0:
					return a.free[rng.IntN(len(a.free))]
				case r == 1:
					return a.next + selector.Slot(rng.IntN(3))
				case r == 2:
					return selector.Slot(rng.Uint32())
				}
				return selector.MaxSlot
			}
			const steps = 30_000
			target := 0
			for step := range steps {
				if step%2000 == 0 {
					target = rng.IntN(300)
				}
				prio := randomPriority(rng)
				insertShare := 250
				if len(m.items) < target {
					insertShare = 450
				}
				var slot selector.Slot
				var err, want error
				var op string
				switch r := rng.IntN(1000); {
				case r < insertShare:
					op = "insert"
					slot = a.alloc()
					err, want = s.Insert(slot, prio), m.insert(slot, prio)
					if want != nil {
						a.release(slot) // the table would not have taken it
					}
				case r < 500 && len(m.items) > 0:
					op = "insert present"
					slot = m.items[rng.IntN(len(m.items))].slot
					err, want = s.Insert(slot, prio), m.insert(slot, prio)
				case r < 700:
					op = "update"
					if len(m.items) > 0 && rng.IntN(8) > 0 {
						slot = m.items[rng.IntN(len(m.items))].slot
					} else {
						slot = absentSlot()
					}
					err, want = s.Update(slot, prio), m.update(slot, prio)
				case r < 999:
					op = "delete"
					if len(m.items) > 0 && rng.IntN(8) > 0 {
						slot = m.items[rng.IntN(len(m.items))].slot
					} else {
						slot = absentSlot()
					}
					err, want = s.Delete(slot), m.delete(slot)
					if want == nil {
						a.release(slot)
					}
				default:
					op = "clear"
					s.Clear()
					m.items, a = nil, allocator{}
				}
				checkStep(t, s, m, step, op, slot, prio, err, want)
			}
			if a.next > 400 {
				t.Errorf("allocator reached slot %d, want slots reused", a.next)
			}
		})
	}
}

// TestConsistencySparse is TestConsistencyTable with slots drawn at random
// from sparseSlots, small and far, present or not.
func TestConsistencySparse(t *testing.T) {
	for _, k := range consistencySpecs() {
		t.Run(k.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(99, 100))
			s := mustNew(t, k.spec, 7)
			m := &model{spec: k.spec}
			const steps = 30_000
			for step := range steps {
				slot := sparseSlots[rng.IntN(len(sparseSlots))]
				prio := randomPriority(rng)
				var err, want error
				var op string
				switch r := rng.IntN(1000); {
				case r < 450:
					op = "insert"
					err, want = s.Insert(slot, prio), m.insert(slot, prio)
				case r < 700:
					op = "update"
					err, want = s.Update(slot, prio), m.update(slot, prio)
				case r < 999:
					op = "delete"
					err, want = s.Delete(slot), m.delete(slot)
				default:
					op = "clear"
					s.Clear()
					m.items = nil
				}
				checkStep(t, s, m, step, op, slot, prio, err, want)
			}
		})
	}
}
