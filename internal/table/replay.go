package table

import (
	"fmt"
)

// The Replay methods re-apply changes read back from the write-ahead log,
// at start, before the table serves anyone. Each does exactly what the
// logged change did and nothing more: no waiting on the rate limiter, no
// eviction and no max_times_sampled deletion, since the log holds those
// deletes as records of their own. The rate limiter counts each change as
// it did the first time. A record naming a key the table does not hold is
// an error the caller reports; the table is unchanged by it.

// ReplayInsert adds a logged new item, keeping its priority and
// inserted_at; it gets the next Seq. On success the table owns the
// references in item.Chunks.
func (t *Table) ReplayInsert(item Item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(item.Trajectory) == 0 {
		return fmt.Errorf("%w: item %d has no columns", ErrInvalidItem, item.Key)
	}
	if err := t.checkPriorityLocked(item.Priority); err != nil {
		return fmt.Errorf("item %d: %w", item.Key, err)
	}
	if _, ok := t.mu.keys.get(item.Key); ok {
		return fmt.Errorf("%w: item %d is already in the table", ErrInvalidItem, item.Key)
	}
	item.TimesSampled = 0
	it := t.addLocked(&item)
	t.mu.limiter.Insert()
	for _, e := range t.exts {
		e.OnInsert(it)
	}
	return nil
}

// ReplaySample sets a logged sample's times_sampled on the item with key.
func (t *Table) ReplaySample(key uint64, timesSampled int32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	slot, ok := t.mu.keys.get(key)
	if !ok {
		return fmt.Errorf("sample of item %d, which the table does not hold", key)
	}
	item := t.mu.items.mutable(slot)
	if item.TimesSampled == 0 && timesSampled > 0 {
		t.mu.numUniqueSamples++
	}
	item.TimesSampled = timesSampled
	t.mu.limiter.Sample()
	for _, e := range t.exts {
		e.OnSample(item)
	}
	return nil
}

// ReplayUpdate sets a logged priority on the item with key.
func (t *Table) ReplayUpdate(key uint64, priority float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkPriorityLocked(priority); err != nil {
		return fmt.Errorf("item %d: %w", key, err)
	}
	slot, ok := t.mu.keys.get(key)
	if !ok {
		return fmt.Errorf("priority update of item %d, which the table does not hold", key)
	}
	item := t.mu.items.mutable(slot)
	prev := item.Priority
	item.Priority = priority
	t.updateSelectorsLocked(slot, priority)
	for _, e := range t.exts {
		e.OnUpdate(item, prev)
	}
	return nil
}

// ReplayDelete removes the item with key.
func (t *Table) ReplayDelete(key uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	slot, ok := t.mu.keys.get(key)
	if !ok {
		return fmt.Errorf("delete of item %d, which the table does not hold", key)
	}
	t.deleteLocked(slot)
	return nil
}
