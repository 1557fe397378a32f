package table

import "sync"

// Stats is a table extension that keeps running statistics of a table: how
// many items were inserted, sampled, updated, deleted and reset away, the
// sum of the priorities held, and how often items had been sampled when they
// left. It costs O(1) per operation and no memory per item. Its hooks run
// under the table lock; Snapshot may be called from any goroutine.
type Stats struct {
	mu sync.Mutex
	s  StatsSnapshot // guarded by mu
}

var _ RestoreExtension = (*Stats)(nil)

// StatsSnapshot is a copy of a Stats' figures.
type StatsSnapshot struct {
	Inserts, Samples, Updates, Deletes, Resets int64
	// Items is the number of items held.
	Items int64
	// PrioritySum is the sum of the priorities of the items held.
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
	s.s.PrioritySum += item.Priority
	s.mu.Unlock()
}

// OnRestore implements RestoreExtension: a restored item is held, but was
// not inserted since the statistics started.
func (s *Stats) OnRestore(item *Item) {
	s.mu.Lock()
	s.s.Items++
	s.s.PrioritySum += item.Priority
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
	s.s.PrioritySum += item.Priority - old
	s.mu.Unlock()
}

// OnDelete implements Extension.
func (s *Stats) OnDelete(item *Item) {
	s.mu.Lock()
	s.s.Deletes++
	s.s.Items--
	s.s.PrioritySum -= item.Priority
	s.s.SampledAtDelete += int64(item.TimesSampled)
	s.mu.Unlock()
}

// OnReset implements Extension.
func (s *Stats) OnReset() {
	s.mu.Lock()
	s.s.Resets++
	s.s.Items = 0
	s.s.PrioritySum = 0
	s.mu.Unlock()
}

// Snapshot returns the current figures.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s
}
