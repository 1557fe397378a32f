package selector_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// weights returns the normalised weights p^exponent (0 when p is 0) of the
// keys with positive weight.
func weights(priorities map[uint64]float64, exponent float64) map[uint64]float64 {
	w := make(map[uint64]float64)
	total := 0.0
	for k, p := range priorities {
		if p == 0 {
			continue
		}
		w[k] = math.Pow(p, exponent)
		total += w[k]
	}
	for k := range w {
		w[k] /= total
	}
	return w
}

// sampleMatches draws from s and checks the reported probabilities against
// want to 1e-12, and the counts with a chi-square test at p = 0.001.
func sampleMatches(t *testing.T, s selector.Selector, want map[uint64]float64, draws int) {
	t.Helper()
	observed := make(map[uint64]int)
	for range draws {
		c := mustSample(t, s)
		p, ok := want[c.Key]
		if !ok {
			t.Fatalf("drew key %d, which has weight 0", c.Key)
		}
		if math.Abs(c.Probability-p) > 1e-12 {
			t.Fatalf("key %d: Probability = %v, want %v", c.Key, c.Probability, p)
		}
		observed[c.Key]++
	}
	chiSquare(t, observed, want, draws)
}

// TestPrioritizedDistribution draws 100k times from priorities
// {1, 2, 3, 4, 0}: the key of priority 0 is never drawn, the reported
// probabilities equal w/Σw to 1e-12 and the counts pass a chi-square test
// at p = 0.001 (df = 3: 16.27). Then it updates, deletes and inserts, and
// checks the new weights the same way (df = 4: 18.47).
func TestPrioritizedDistribution(t *testing.T) {
	const draws = 100_000
	for _, exponent := range []float64{1, 0.5, 0, 2} {
		t.Run(fmt.Sprintf("exponent=%v", exponent), func(t *testing.T) {
			s := selector.NewPrioritized(exponent, 1234)
			prios := map[uint64]float64{0: 1, 1: 2, 2: 3, 3: 4, 4: 0}
			for key := range uint64(5) {
				mustInsert(t, s, key, prios[key])
			}
			sampleMatches(t, s, weights(prios, exponent), draws)

			mustUpdate(t, s, 0, 10)
			mustDelete(t, s, 2)
			mustUpdate(t, s, 4, 5)
			mustInsert(t, s, 5, 0.5)
			mustUpdate(t, s, 3, 0)
			mustInsert(t, s, 6, 0)
			mustInsert(t, s, 7, 1.5)
			prios = map[uint64]float64{0: 10, 1: 2, 3: 0, 4: 5, 5: 0.5, 6: 0, 7: 1.5}
			sampleMatches(t, s, weights(prios, exponent), draws)
		})
	}
}

// TestPrioritizedZero checks the rules for priority 0.
func TestPrioritizedZero(t *testing.T) {
	t.Run("all zero is uniform", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		for key := range uint64(4) {
			mustInsert(t, s, key, 0)
		}
		sampleMatches(t, s, map[uint64]float64{0: 0.25, 1: 0.25, 2: 0.25, 3: 0.25}, 20_000)
	})
	t.Run("zero never drawn beside a tiny weight", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		for key := range uint64(100) {
			mustInsert(t, s, key, 0)
		}
		mustInsert(t, s, 100, 5e-324) // the smallest positive float64
		for range 10_000 {
			if c := mustSample(t, s); c.Key != 100 || c.Probability != 1 {
				t.Fatalf("Sample() = %+v, want key 100 with probability 1", c)
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
		mustInsert(t, s, 0, 0)
		mustInsert(t, s, 1, 5)
		mustInsert(t, s, 2, 1e-9)
		mustInsert(t, s, 3, 0)
		sampleMatches(t, s, map[uint64]float64{1: 0.5, 2: 0.5}, 20_000)
	})
	t.Run("empty weights after deletes is uniform", func(t *testing.T) {
		s := selector.NewPrioritized(1, 5)
		mustInsert(t, s, 0, 0)
		mustInsert(t, s, 1, 3)
		mustInsert(t, s, 2, 0)
		mustDelete(t, s, 1)
		sampleMatches(t, s, map[uint64]float64{0: 0.5, 2: 0.5}, 20_000)
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
		if c := mustSample(t, s); c.Key != 1 || c.Probability != 1 {
			t.Fatalf("Sample() = %+v, want key 1 with probability 1", c)
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
	for key := range uint64(1000) {
		mustInsert(t, s, key, selector.MaxPriorityWeight)
	}
	for range 100 {
		if c := mustSample(t, s); c.Probability != 1.0/1000 {
			t.Fatalf("Probability = %v, want 1/1000", c.Probability)
		}
	}
}

// TestPrioritizedGrowth inserts past several doublings of the tree and
// deletes back down, checking the probability of one marked key.
func TestPrioritizedGrowth(t *testing.T) {
	s := selector.NewPrioritized(1, 3)
	mustInsert(t, s, 0, 1000)
	for key := uint64(1); key <= 5000; key++ {
		mustInsert(t, s, key, 1)
	}
	for key := uint64(1); key <= 4000; key++ {
		mustDelete(t, s, key)
	}
	// Key 0 has weight 1000 of 2000.
	found := false
	for range 1000 {
		c := mustSample(t, s)
		want := 1.0 / 2000
		if c.Key == 0 {
			want, found = 0.5, true
		}
		if math.Abs(c.Probability-want) > 1e-12 {
			t.Fatalf("key %d: Probability = %v, want %v", c.Key, c.Probability, want)
		}
	}
	if !found {
		t.Fatal("key 0 (half the weight) never drawn in 1000 draws")
	}
}
