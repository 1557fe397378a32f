package table

import (
	"math"
	"sync"
)

// Stats is a table extension that keeps running statistics of a table: how
// many items were inserted, sampled, updated, deleted and reset away, the
// sum of the priorities held, and how often items had been sampled when they
// left. It costs O(1) per operation and no memory per item. Its hooks run
// under the table lock; Snapshot may be called from any goroutine.
type Stats struct {
	mu sync.Mutex
	s  StatsSnapshot // guarded by mu; PrioritySum is filled in by Snapshot
	// The priorities held, summed apart: the finite ones with Neumaier's
	// compensation (a running sum that adds 1e20 and 1 and takes 1e20 away
	// must come back to 1, not 0), and the infinite ones counted (a heap
	// table holds them, and +Inf - +Inf would leave the sum NaN for good).
	sum, comp      float64
	posInf, negInf int64
}

// addPriority adds p to the sum of the priorities held (under mu).
func (s *Stats) addPriority(p float64) {
	switch {
	case math.IsInf(p, 1):
		s.posInf++
	case math.IsInf(p, -1):
		s.negInf++
	case math.IsNaN(p):
	default:
		t := s.sum + p
		if math.IsInf(t, 0) {
			s.sum = t // overflowed: it stays infinite, as a plain sum would
			return
		}
		if math.Abs(s.sum) >= math.Abs(p) {
			s.comp += (s.sum - t) + p
		} else {
			s.comp += (p - t) + s.sum
		}
		s.sum = t
	}
}

// subPriority takes p away from the sum of the priorities held (under mu).
func (s *Stats) subPriority(p float64) {
	switch {
	case math.IsInf(p, 1):
		s.posInf--
	case math.IsInf(p, -1):
		s.negInf--
	default:
		s.addPriority(-p)
	}
}

var _ RestoreExtension = (*Stats)(nil)

// StatsSnapshot is a copy of a Stats' figures.
type StatsSnapshot struct {
	Inserts, Samples, Updates, Deletes, Resets int64
	// Items is the number of items held.
	Items int64
	// PrioritySum is the sum of the priorities of the items held:
	// +Inf or -Inf while such a priority is held (NaN while both are).
	PrioritySum float64
	// SampledAtDelete sums TimesSampled over deleted items, so that
	// SampledAtDelete/Deletes is how often an item was replayed before it
	// left the table.
	SampledAtDelete int64
}

// MeanPriority is PrioritySum/Items, or 0 for an empty table.
func (s StatsSnapshot) MeanPriority() float64 {
	if s.Items == 0 {
		return 0
	}
	return s.PrioritySum / float64(s.Items)
}

// NewStats returns an empty Stats extension.
func NewStats() *Stats { return &Stats{} }

// OnInsert implements Extension.
func (s *Stats) OnInsert(item *Item) {
	s.mu.Lock()
	s.s.Inserts++
	s.s.Items++
	s.addPriority(item.Priority)
	s.mu.Unlock()
}

// OnRestore implements RestoreExtension: a restored item is held, but was
// not inserted since the statistics started.
func (s *Stats) OnRestore(item *Item) {
	s.mu.Lock()
	s.s.Items++
	s.addPriority(item.Priority)
	s.mu.Unlock()
}

// OnSample implements Extension.
func (s *Stats) OnSample(*Item) {
	s.mu.Lock()
	s.s.Samples++
	s.mu.Unlock()
}

// OnUpdate implements Extension.
func (s *Stats) OnUpdate(item *Item, old float64) {
	s.mu.Lock()
	s.s.Updates++
	s.subPriority(old)
	s.addPriority(item.Priority)
	s.mu.Unlock()
}

// OnDelete implements Extension.
func (s *Stats) OnDelete(item *Item) {
	s.mu.Lock()
	s.s.Deletes++
	s.s.Items--
	s.subPriority(item.Priority)
	s.s.SampledAtDelete += int64(item.TimesSampled)
	s.mu.Unlock()
}

// OnReset implements Extension.
func (s *Stats) OnReset() {
	s.mu.Lock()
	s.s.Resets++
	s.s.Items = 0
	s.sum, s.comp, s.posInf, s.negInf = 0, 0, 0, 0
	s.mu.Unlock()
}

// Snapshot returns the current figures.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.s
	switch {
	case s.posInf > 0 && s.negInf > 0:
		out.PrioritySum = math.NaN() // while both are held, and no longer
	case s.posInf > 0:
		out.PrioritySum = math.Inf(1)
	case s.negInf > 0:
		out.PrioritySum = math.Inf(-1)
	default:
		out.PrioritySum = s.sum + s.comp
	}
	return out
}
