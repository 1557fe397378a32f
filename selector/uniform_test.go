package selector_test

import (
	"slices"
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// TestUniformDistribution draws 100k times from 10 slots and checks the
// counts with a chi-square test at p = 0.001 (df = 9: 27.88), then again
// after deleting three slots (df = 6: 22.46), and from sparse slots
// (df = 4: 18.47). Every draw must report 1/N.
func TestUniformDistribution(t *testing.T) {
	const draws = 100_000
	u := selector.NewUniform(42)
	for slot := range selector.Slot(10) {
		mustInsert(t, u, slot, float64(slot))
	}
	// check draws and tests the counts of slots, each expected 1/N.
	check := func(slots []selector.Slot) {
		t.Helper()
		expected := make([]float64, len(slots))
		for i := range expected {
			expected[i] = 1 / float64(len(slots))
		}
		var observed []int
		for range draws {
			c := mustSample(t, u)
			if c.Probability != 1/float64(len(slots)) {
				t.Fatalf("Probability = %v, want 1/%d", c.Probability, len(slots))
			}
			i := slices.Index(slots, c.Slot)
			if i < 0 {
				t.Fatalf("drew slot %d, not one of %v", c.Slot, slots)
			}
			observed = tally(observed, i)
		}
		chiSquare(t, observed, expected, draws)
	}
	check([]selector.Slot{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})

	mustDelete(t, u, 0)
	mustDelete(t, u, 9)
	mustDelete(t, u, 4)
	mustUpdate(t, u, 5, 1000) // priorities are ignored
	check([]selector.Slot{1, 2, 3, 5, 6, 7, 8})

	u.Clear()
	sparse := []selector.Slot{1_000_000, 5, 0, 70_000, 4096}
	for _, slot := range sparse {
		mustInsert(t, u, slot, 1)
	}
	check(sparse)
}

// TestUniformSeed checks that a seed makes draws reproducible.
func TestUniformSeed(t *testing.T) {
	a, b := selector.NewUniform(7), selector.NewUniform(7)
	for slot := range selector.Slot(50) {
		mustInsert(t, a, slot, 0)
		mustInsert(t, b, slot, 0)
	}
	for i := range 1000 {
		if ca, cb := mustSample(t, a), mustSample(t, b); ca != cb {
			t.Fatalf("draw %d: %+v != %+v", i, ca, cb)
		}
	}
}
