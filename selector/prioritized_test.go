package selector_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// sp is a slot with its priority.
type sp struct {
	slot selector.Slot
	prio float64
}

// insertAll inserts every item into s.
func insertAll(t *testing.T, s selector.Selector, items []sp) {
	t.Helper()
	for _, it := range items {
		mustInsert(t, s, it.slot, it.prio)
	}
}

// weights returns the normalised weights p^exponent (0 when p is 0) of
// items, in their order.
func weights(items []sp, exponent float64) []float64 {
	w := make([]float64, len(items))
	total := 0.0
	for i, it := range items {
		if it.prio != 0 {
			w[i] = math.Pow(it.prio, exponent)
			total += w[i]
		}
	}
	for i := range w {
		w[i] /= total
	}
	return w
}

// uniformly returns n probabilities of 1/n.
func uniformly(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1 / float64(n)
	}
	return w
}

// sampleMatches draws from s, whose slots are those of items, and checks
// that it never draws a slot whose probability in want is 0, the reported
// probabilities against want to 1e-12, and the counts with a chi-square
// test at p = 0.001.
func sampleMatches(t *testing.T, s selector.Selector, items []sp, want []float64, draws int) {
	t.Helper()
	observed := make([]int, len(items))
	for range draws {
		c := mustSample(t, s)
		i := slices.IndexFunc(items, func(it sp) bool { return it.slot == c.Slot })
		if i < 0 {
			t.Fatalf("drew slot %d, which is not present", c.Slot)
		}
		if want[i] == 0 {
			t.Fatalf("drew slot %d, which has weight 0", c.Slot)
		}
		if math.Abs(c.Probability-want[i]) > 1e-12 {
			t.Fatalf("slot %d: Probability = %v, want %v", c.Slot, c.Probability, want[i])
		}
		observed[i]++
	}
	chiSquare(t, observed, want, draws)
}

// TestPrioritizedDistribution draws 100k times from priorities
// {1, 2, 3, 4, 0}: the slot of priority 0 is never drawn, the reported
// probabilities equal w/Σw to 1e-12 and the counts pass a chi-square test
// at p = 0.001 (df = 3: 16.27). Then it updates, deletes and inserts, and
// checks the new weights the same way (df = 4: 18.47). Then it does the
// same on sparse slots, which leave most leaves of the tree unused (df = 3,
// then df = 2: 13.82 once the largest slot is deleted).
func TestPrioritizedDistribution(t *testing.T) {
	const draws = 100_000
	for _, exponent := range []float64{1, 0.5, 0, 2} {
		t.Run(fmt.Sprintf("exponent=%v", exponent), func(t *testing.T) {
			s := selector.NewPrioritized(exponent, 1234)
			items := []sp{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 0}}
			insertAll(t, s, items)
			sampleMatches(t, s, items, weights(items, exponent), draws)

			mustUpdate(t, s, 0, 10)
			mustDelete(t, s, 2)
			mustUpdate(t, s, 4, 5)
			mustInsert(t, s, 5, 0.5)
			mustUpdate(t, s, 3, 0)
			mustInsert(t, s, 6, 0)
			mustInsert(t, s, 7, 1.5)
			items = []sp{{0, 10}, {1, 2}, {3, 0}, {4, 5}, {5, 0.5}, {6, 0}, {7, 1.5}}
			sampleMatches(t, s, items, weights(items, exponent), draws)

			s.Clear()
			items = []sp{{1_000_000, 3}, {0, 1}, {5, 0}, {65_536, 2}, {777, 4}}
			insertAll(t, s, items)
			sampleMatches(t, s, items, weights(items, exponent), draws)

			mustDelete(t, s, 1_000_000)
			items = items[1:]
			sampleMatches(t, s, items, weights(items, exponent), draws)
		})
	}
}

// TestPrioritizedZero checks the rules for priority 0.
func TestPrioritizedZero(t *testing.T) {
	t.Run("all zero is uniform", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		items := []sp{{0, 0}, {1, 0}, {2, 0}, {3, 0}}
		insertAll(t, s, items)
		sampleMatches(t, s, items, uniformly(4), 20_000)
	})
	t.Run("all zero is uniform over sparse slots", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		items := []sp{{0, 0}, {5, 0}, {1_000_000, 0}, {6, 3}}
		insertAll(t, s, items)
		mustDelete(t, s, 6)
		items = items[:3]
		sampleMatches(t, s, items, uniformly(3), 20_000)
	})
	t.Run("zero never drawn beside a tiny weight", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		for slot := range selector.Slot(100) {
			mustInsert(t, s, slot, 0)
		}
		mustInsert(t, s, 100, 5e-324) // the smallest positive float64
		for range 10_000 {
			if c := mustSample(t, s); c.Slot != 100 || c.Probability != 1 {
				t.Fatalf("Sample() = %+v, want slot 100 with probability 1", c)
			}
		}
		// Back to all zero: uniform again.
		mustUpdate(t, s, 100, 0)
		if c := mustSample(t, s); c.Probability != 1.0/101 {
			t.Fatalf("Probability = %v, want 1/101", c.Probability)
		}
	})
	t.Run("exponent 0 keeps zero at zero", func(t *testing.T) {
		s := selector.NewPrioritized(0, 5)
		items := []sp{{0, 0}, {1, 5}, {2, 1e-9}, {3, 0}}
		insertAll(t, s, items)
		sampleMatches(t, s, items, []float64{0, 0.5, 0.5, 0}, 20_000)
	})
	t.Run("empty weights after deletes is uniform", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		mustInsert(t, s, 0, 0)
		mustInsert(t, s, 1, 3)
		mustInsert(t, s, 2, 0)
		mustDelete(t, s, 1)
		sampleMatches(t, s, []sp{{0, 0}, {2, 0}}, uniformly(2), 20_000)
	})
	t.Run("deleted slot is never drawn", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		mustInsert(t, s, 0, 0)
		mustInsert(t, s, 1, 1e290)
		mustInsert(t, s, 2, 1e-300)
		mustDelete(t, s, 1)
		for range 1000 {
			if c := mustSample(t, s); c.Slot != 2 || c.Probability != 1 {
				t.Fatalf("Sample() = %+v, want slot 2 with probability 1", c)
			}
		}
		// Reinserting the deleted slot brings its new weight back.
		mustInsert(t, s, 1, 1e-300)
		sampleMatches(t, s, []sp{{0, 0}, {1, 1e-300}, {2, 1e-300}}, []float64{0, 0.5, 0.5}, 20_000)
	})
}

// TestPrioritizedRejects checks that invalid priorities change nothing.
func TestPrioritizedRejects(t *testing.T) {
	s := selector.NewPrioritized(1, 1)
	mustInsert(t, s, 1, 1)
	mustInsert(t, s, 2, 0)
	for _, p := range []float64{math.NaN(), -1, math.Inf(1), math.Inf(-1), -5e-324, 1e300} {
		if err := s.Insert(3, p); !errors.Is(err, selector.ErrInvalidPriority) {
			t.Errorf("Insert(3, %v) = %v, want ErrInvalidPriority", p, err)
		}
		if err := s.Insert(1_000_000, p); !errors.Is(err, selector.ErrInvalidPriority) {
			t.Errorf("Insert(1_000_000, %v) = %v, want ErrInvalidPriority", p, err)
		}
		if err := s.Update(1, p); !errors.Is(err, selector.ErrInvalidPriority) {
			t.Errorf("Update(1, %v) = %v, want ErrInvalidPriority", p, err)
		}
		if err := s.Update(2, p); !errors.Is(err, selector.ErrInvalidPriority) {
			t.Errorf("Update(2, %v) = %v, want ErrInvalidPriority", p, err)
		}
	}
	if s.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", s.Len())
	}
	for range 100 {
		if c := mustSample(t, s); c.Slot != 1 || c.Probability != 1 {
			t.Fatalf("Sample() = %+v, want slot 1 with probability 1", c)
		}
	}
	// The weight limit depends on the exponent.
	if err := selector.NewPrioritized(0.5, 1).CheckPriority(1e300); err != nil {
		t.Errorf("CheckPriority(1e300) with exponent 0.5: %v", err)
	}
	if err := s.CheckPriority(selector.MaxPriorityWeight); err != nil {
		t.Errorf("CheckPriority(MaxPriorityWeight): %v", err)
	}
}

// TestPrioritizedLargeWeights checks that the largest accepted weights
// still sum to a finite total.
func TestPrioritizedLargeWeights(t *testing.T) {
	s := selector.NewPrioritized(1, 1)
	for slot := range selector.Slot(1000) {
		mustInsert(t, s, slot, selector.MaxPriorityWeight)
	}
	for range 100 {
		if c := mustSample(t, s); c.Probability != 1.0/1000 {
			t.Fatalf("Probability = %v, want 1/1000", c.Probability)
		}
	}
}

// TestPrioritizedGrowth inserts past several doublings of the tree and
// deletes back down, checking the probability of one marked slot; then
// grows the tree at once to a far slot.
func TestPrioritizedGrowth(t *testing.T) {
	s := selector.NewPrioritized(1, 3)
	mustInsert(t, s, 0, 1000)
	for slot := selector.Slot(1); slot <= 5000; slot++ {
		mustInsert(t, s, slot, 1)
	}
	for slot := selector.Slot(1); slot <= 4000; slot++ {
		mustDelete(t, s, slot)
	}
	// Slot 0 has weight 1000 of 2000.
	check := func(marked selector.Slot, others int) {
		t.Helper()
		found := false
		for range 1000 {
			c := mustSample(t, s)
			want := 1.0 / 2000
			if c.Slot == marked {
				want, found = 0.5, true
			}
			if math.Abs(c.Probability-want) > 1e-12 {
				t.Fatalf("slot %d: Probability = %v, want %v", c.Slot, c.Probability, want)
			}
		}
		if !found {
			t.Fatalf("slot %d (half the weight) never drawn in 1000 draws", marked)
		}
		if s.Len() != others+1 {
			t.Fatalf("Len() = %d, want %d", s.Len(), others+1)
		}
	}
	check(0, 1000)
	// A far slot grows the tree past many doublings at once.
	mustDelete(t, s, 0)
	mustInsert(t, s, 3_000_000, 1000)
	check(3_000_000, 1000)
}
