package selector_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// modelItem is what the reference model knows of a key.
type modelItem struct {
	priority float64
	inserted uint64 // order of insertion
	touched  uint64 // order of the last insert or update
}

// model is a trivially correct reference for every built-in kind: it keeps
// every key in a map and scans it to answer.
type model struct {
	spec  selector.Spec
	items map[uint64]modelItem
	seq   uint64
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

// best returns the key a deterministic kind must pick.
func (m *model) best() (uint64, bool) {
	var bestKey uint64
	var best modelItem
	found := false
	for k, it := range m.items {
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
			bestKey, best, found = k, it, true
		}
	}
	return bestKey, found
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
	it, ok := m.items[c.Key]
	if !ok {
		t.Fatalf("Sample() = %+v, not a present key", c)
	}
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
				t.Fatalf("Sample() = %+v, a key of weight 0 while the total is %v", c, total)
			}
			want = w / total
		}
		if math.Abs(c.Probability-want) > 1e-9*want {
			t.Fatalf("Sample() = %+v, want probability %v", c, want)
		}
	default:
		if key, _ := m.best(); c.Key != key || c.Probability != 1 {
			t.Fatalf("Sample() = %+v, want key %d (%+v) with probability 1", c, key, m.items[key])
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

// TestConsistency applies a long random sequence of operations to every
// built-in selector and to the model, checking the errors, Len and Sample
// after each.
func TestConsistency(t *testing.T) {
	specs := append([]kindCase{}, builtins...)
	for _, e := range []float64{0, 0.5, 2} {
		specs = append(specs, kindCase{
			fmt.Sprintf("prioritized_%v", e),
			selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: e},
		})
	}
	for _, k := range specs {
		t.Run(k.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(99, 100))
			s := mustNew(t, k.spec, 7)
			m := &model{spec: k.spec, items: make(map[uint64]modelItem)}
			const steps = 30_000
			for step := range steps {
				key := uint64(rng.IntN(150))
				prio := randomPriority(rng)
				_, present := m.items[key]
				var err, want error
				var op string
				switch r := rng.IntN(1000); {
				case r < 450:
					op = "insert"
					err = s.Insert(key, prio)
					switch {
					case !m.valid(prio):
						want = selector.ErrInvalidPriority
					case present:
						want = selector.ErrExists
					default:
						m.seq++
						m.items[key] = modelItem{priority: prio, inserted: m.seq, touched: m.seq}
					}
				case r < 700:
					op = "update"
					err = s.Update(key, prio)
					switch {
					case !m.valid(prio):
						want = selector.ErrInvalidPriority
					case !present:
						want = selector.ErrNotFound
					default:
						m.seq++
						it := m.items[key]
						it.priority, it.touched = prio, m.seq
						m.items[key] = it
					}
				case r < 999:
					op = "delete"
					err = s.Delete(key)
					if present {
						delete(m.items, key)
					} else {
						want = selector.ErrNotFound
					}
				default:
					op = "clear"
					s.Clear()
					clear(m.items)
				}
				if !errors.Is(err, want) || (err == nil) != (want == nil) {
					t.Fatalf("step %d: %s(%d, %v) = %v, want %v", step, op, key, prio, err, want)
				}
				if s.Len() != len(m.items) {
					t.Fatalf("step %d: Len() = %d, want %d", step, s.Len(), len(m.items))
				}
				m.checkSample(t, s)
			}
		})
	}
}
