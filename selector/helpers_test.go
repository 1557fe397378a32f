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

func mustInsert(tb testing.TB, s selector.Selector, slot selector.Slot, priority float64) {
	tb.Helper()
	if err := s.Insert(slot, priority); err != nil {
		tb.Fatalf("Insert(%d, %v): %v", slot, priority, err)
	}
}

func mustUpdate(tb testing.TB, s selector.Selector, slot selector.Slot, priority float64) {
	tb.Helper()
	if err := s.Update(slot, priority); err != nil {
		tb.Fatalf("Update(%d, %v): %v", slot, priority, err)
	}
}

func mustDelete(tb testing.TB, s selector.Selector, slot selector.Slot) {
	tb.Helper()
	if err := s.Delete(slot); err != nil {
		tb.Fatalf("Delete(%d): %v", slot, err)
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

// Critical values of the chi-square distribution at p = 0.001, indexed by
// degrees of freedom. A statistic above them has a 0.1% chance under the
// null hypothesis; with fixed seeds the tests are deterministic anyway.
var chiSquareCritical001 = [...]float64{
	1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52,
	6: 22.46, 7: 24.32, 8: 26.12, 9: 27.88,
}

// chiSquare checks observed counts against expected probabilities at
// p = 0.001. Both are indexed by slot; a slot of expected probability 0 (or
// beyond expected) must never be observed.
func chiSquare(tb testing.TB, observed []int, expected []float64, draws int) {
	tb.Helper()
	stat, cells := 0.0, 0
	for slot, p := range expected {
		if p == 0 {
			continue
		}
		e := p * float64(draws)
		d := float64(count(observed, slot)) - e
		stat += d * d / e
		cells++
	}
	for slot, n := range observed {
		if n > 0 && (slot >= len(expected) || expected[slot] == 0) {
			tb.Errorf("slot %d drawn %d times, expected never", slot, n)
		}
	}
	df := cells - 1
	if df < 1 || df >= len(chiSquareCritical001) {
		tb.Fatalf("no critical value for %d degrees of freedom", df)
	}
	crit := chiSquareCritical001[df]
	if stat > crit {
		tb.Errorf("chi-square = %.2f > %.2f (df=%d, p=0.001); observed %v, expected probabilities %v",
			stat, crit, df, observed, expected)
	}
	tb.Logf("chi-square = %.2f (critical %.2f, df=%d)", stat, crit, df)
}

// count returns counts[i], or 0 when i is beyond counts.
func count(counts []int, i int) int {
	if i >= len(counts) {
		return 0
	}
	return counts[i]
}

// tally adds one to counts[i], growing counts as needed.
func tally(counts []int, i int) []int {
	if i >= len(counts) {
		counts = append(counts, make([]int, i+1-len(counts))...)
	}
	counts[i]++
	return counts
}
