package table

import (
	"errors"
	"fmt"

	"github.com/reverie-rl/reverie/selector"
)

// RestoreExtension is an Extension that tells items restored from a
// checkpoint from new inserts. For each restored item the table calls
// OnRestore on extensions that implement it, and OnInsert on the others.
type RestoreExtension interface {
	Extension
	// OnRestore runs after an item is loaded from a checkpoint.
	OnRestore(item *Item)
}

// RestoreCounters are the counters a checkpoint carries for a table.
type RestoreCounters struct {
	Inserts, Samples   int64
	NumDeletedEpisodes int64
	NumUniqueSamples   int64
}

// RestoreReport says what FinishRestore did.
type RestoreReport struct {
	// Loaded counts the items RestoreItem took.
	Loaded int64
	// Inserts, Samples and Deletes are the rate limiter's counters after
	// the load, before the removals below.
	Inserts, Samples, Deletes int64
	// OverSampled counts items removed because they had been sampled
	// max_times_sampled times or more (the configured value may be lower
	// than the one they were sampled under).
	OverSampled int64
	// Evicted counts items the remover evicted to bring the table down to
	// max_size.
	Evicted int64
	// SamplesAdded is how much the samples counter was raised to bring
	// the rate limiter's diff down to the configured max_diff.
	SamplesAdded int64
}

// BeginRestore prepares a table that has never been used for RestoreItem.
func (t *Table) BeginRestore() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	ins, smp, del := t.mu.limiter.Counts()
	switch {
	case t.mu.closed:
		return ErrClosed
	case t.mu.restoring:
		return fmt.Errorf("table %q: restore already begun", t.name)
	case t.mu.keys.len() > 0 || t.mu.nextSeq > 0 || ins != 0 || smp != 0 || del != 0 ||
		t.mu.inserts.len() > 0 || t.mu.samples.len() > 0 || t.mu.items.snap != nil:
		return fmt.Errorf("table %q: restore into a table that was used", t.name)
	}
	t.mu.restoring = true
	return nil
}

// RestoreItem adds an item loaded from a checkpoint, keeping its key,
// priority, times_sampled and inserted_at. Items must come in their
// original insertion order; each gets the next Seq. The rate limiter does
// not count them, and neither max_size nor max_times_sampled applies until
// FinishRestore. On success the table owns the references in item.Chunks.
func (t *Table) RestoreItem(item Item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.mu.restoring {
		return errors.New("table: RestoreItem without BeginRestore")
	}
	if len(item.Trajectory) == 0 {
		return fmt.Errorf("%w: item %d has no columns", ErrInvalidItem, item.Key)
	}
	if err := t.checkPriorityLocked(item.Priority); err != nil {
		return fmt.Errorf("item %d: %w", item.Key, err)
	}
	if _, ok := t.mu.keys.get(item.Key); ok {
		return fmt.Errorf("%w: key %d appears twice", ErrInvalidItem, item.Key)
	}
	it := t.addLocked(&item)
	for _, e := range t.exts {
		if r, ok := e.(RestoreExtension); ok {
			r.OnRestore(it)
		} else {
			e.OnInsert(it)
		}
	}
	return nil
}

// FinishRestore sets the counters and opens the table for use. The rate
// limiter takes the checkpoint's inserts and samples, and deletes =
// inserts - (items loaded), so that the size it believes the table has is
// the real one whatever the checkpoint's counters say: a limiter that
// counts items the table does not hold can block inserts while no sample
// can be served, for ever. (If the checkpoint counts fewer inserts than
// items, inserts is raised to the number of items.)
//
// Then, as the table's own options win over the checkpoint's, items
// sampled max_times_sampled times or more are deleted, and the remover
// evicts items until the table holds at most max_size. Both count as
// deletes, as they would have at the time.
func (t *Table) FinishRestore(c RestoreCounters) RestoreReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	loaded := int64(t.mu.keys.len())
	inserts := max(c.Inserts, loaded)
	samples := max(c.Samples, 0)
	rep := RestoreReport{Loaded: loaded, Inserts: inserts, Samples: samples, Deletes: inserts - loaded}
	t.mu.limiter.Restore(rep.Inserts, rep.Samples, rep.Deletes)
	t.mu.numDeletedEpisodes = max(c.NumDeletedEpisodes, 0)
	t.mu.numUniqueSamples = max(c.NumUniqueSamples, 0)
	t.mu.restoring = false

	rep.OverSampled, rep.Evicted, rep.SamplesAdded = t.trimLocked()
	t.pumpLocked()
	return rep
}

// TrimToConfig applies the table's max_times_sampled and max_size to the
// items it holds, as FinishRestore does: for a table whose items came back
// from the write-ahead log under a config with smaller limits, since a
// replay does only what was logged. The deletes reach the extensions as
// any delete does. It returns what FinishRestore reports of the same.
func (t *Table) TrimToConfig() (overSampled, evicted, samplesAdded int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	overSampled, evicted, samplesAdded = t.trimLocked()
	t.pumpLocked()
	return overSampled, evicted, samplesAdded
}

// trimLocked deletes the items sampled max_times_sampled times or more,
// then has the remover evict until the table holds at most max_size.
func (t *Table) trimLocked() (overSampled, evicted, samplesAdded int64) {
	if t.maxTimesSampled > 0 {
		var over []selector.Slot
		t.mu.keys.all(func(_ uint64, slot selector.Slot) {
			if t.mu.items.at(slot).TimesSampled >= t.maxTimesSampled {
				over = append(over, slot)
			}
		})
		for _, slot := range over {
			t.deleteLocked(slot)
		}
		overSampled = int64(len(over))
	}
	for int64(t.mu.keys.len()) > t.maxSize {
		victim, err := t.mu.remover.Sample()
		if err != nil {
			break
		}
		t.deleteLocked(victim.Slot)
		evicted++
	}
	// The removals above lower the size but not the diff, and the
	// configured limiter may allow a smaller diff than before (a smaller
	// queue, say): above max_diff every insert into a table that is not
	// empty is refused. Only then: a table can be over max_diff in the
	// ordinary way (inserts below min_size_to_sample are not checked),
	// and a trim must not write off samples it owes.
	if overSampled+evicted > 0 {
		samplesAdded = t.mu.limiter.LowerDiffTo()
	}
	return overSampled, evicted, samplesAdded
}
