package selector_test

import (
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// TestUniformDistribution draws 100k times from 10 keys and checks the
// counts with a chi-square test at p = 0.001 (df = 9: 27.88), then again
// after deleting three keys (df = 6: 22.46). Every draw must report 1/N.
func TestUniformDistribution(t *testing.T) {
	const draws = 100_000
	u := selector.NewUniform(42)
	for key := range uint64(10) {
		mustInsert(t, u, key, float64(key))
	}
	check := func(keys []uint64) {
		t.Helper()
		expected := make(map[uint64]float64)
		for _, k := range keys {
			expected[k] = 1 / float64(len(keys))
		}
		observed := make(map[uint64]int)
		for range draws {
			c := mustSample(t, u)
			if c.Probability != 1/float64(len(keys)) {
				t.Fatalf("Probability = %v, want 1/%d", c.Probability, len(keys))
			}
			observed[c.Key]++
		}
		chiSquare(t, observed, expected, draws)
	}
	check([]uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})

	mustDelete(t, u, 0)
	mustDelete(t, u, 9)
	mustDelete(t, u, 4)
	mustUpdate(t, u, 5, 1000) // priorities are ignored
	check([]uint64{1, 2, 3, 5, 6, 7, 8})
}

// TestUniformSeed checks that a seed makes draws reproducible.
func TestUniformSeed(t *testing.T) {
	a, b := selector.NewUniform(7), selector.NewUniform(7)
	for key := range uint64(50) {
		mustInsert(t, a, key, 0)
		mustInsert(t, b, key, 0)
	}
	for i := range 1000 {
		if ca, cb := mustSample(t, a), mustSample(t, b); ca != cb {
			t.Fatalf("draw %d: %+v != %+v", i, ca, cb)
		}
	}
}
