package selector_test

import (
	"testing"

	"github.com/reverie-rl/reverie/selector"
)

// kindCase names a way to make a built-in selector.
type kindCase struct {
	name string
	spec selector.Spec
}

// builtins lists every built-in kind, Prioritized with exponent 1.
var builtins = []kindCase{
	{"fifo", selector.Spec{Kind: selector.KindFIFO}},
	{"lifo", selector.Spec{Kind: selector.KindLIFO}},
	{"uniform", selector.Spec{Kind: selector.KindUniform}},
	{"prioritized", selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 1}},
	{"min_heap", selector.Spec{Kind: selector.KindMinHeap}},
	{"max_heap", selector.Spec{Kind: selector.KindMaxHeap}},
}

func mustNew(tb testing.TB, spec selector.Spec, seed uint64) selector.Selector {
	tb.Helper()
	s, err := selector.New(spec, seed)
	if err != nil {
		tb.Fatalf("New(%+v): %v", spec, err)
	}
	return s
}

func mustInsert(tb testing.TB, s selector.Selector, key uint64, priority float64) {
	tb.Helper()
	if err := s.Insert(key, priority); err != nil {
		tb.Fatalf("Insert(%d, %v): %v", key, priority, err)
	}
}

func mustUpdate(tb testing.TB, s selector.Selector, key uint64, priority float64) {
	tb.Helper()
	if err := s.Update(key, priority); err != nil {
		tb.Fatalf("Update(%d, %v): %v", key, priority, err)
	}
}

func mustDelete(tb testing.TB, s selector.Selector, key uint64) {
	tb.Helper()
	if err := s.Delete(key); err != nil {
		tb.Fatalf("Delete(%d): %v", key, err)
	}
}

func mustSample(tb testing.TB, s selector.Selector) selector.Choice {
	tb.Helper()
	c, err := s.Sample()
	if err != nil {
		tb.Fatalf("Sample: %v", err)
	}
	return c
}

// Critical values of the chi-square distribution at p = 0.001, by degrees
// of freedom. A statistic above them has a 0.1% chance under the null
// hypothesis; with fixed seeds the tests are deterministic anyway.
var chiSquareCritical001 = map[int]float64{
	1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52,
	6: 22.46, 7: 24.32, 8: 26.12, 9: 27.88,
}

// chiSquare checks observed counts against expected probabilities (which
// must all be > 0) at p = 0.001.
func chiSquare(tb testing.TB, observed map[uint64]int, expected map[uint64]float64, draws int) {
	tb.Helper()
	stat := 0.0
	for key, p := range expected {
		e := p * float64(draws)
		d := float64(observed[key]) - e
		stat += d * d / e
	}
	for key, n := range observed {
		if _, ok := expected[key]; !ok {
			tb.Errorf("key %d drawn %d times, expected never", key, n)
		}
	}
	df := len(expected) - 1
	crit, ok := chiSquareCritical001[df]
	if !ok {
		tb.Fatalf("no critical value for %d degrees of freedom", df)
	}
	if stat > crit {
		tb.Errorf("chi-square = %.2f > %.2f (df=%d, p=0.001); observed %v, expected probabilities %v",
			stat, crit, df, observed, expected)
	}
	tb.Logf("chi-square = %.2f (critical %.2f, df=%d)", stat, crit, df)
}
