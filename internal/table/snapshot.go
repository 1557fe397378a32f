package table

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/reverie-rl/reverie/internal/chunkstore"
)

// ErrSnapshotInProgress is returned by BeginSnapshots for a table that
// already has a snapshot being captured.
var ErrSnapshotInProgress = errors.New("table: snapshot in progress")

// Snapshot is a point-in-time image of a table, taken while the table keeps
// serving. It is copy-on-write at page granularity (a page is 4096 item
// slots):
//
//   - BeginSnapshots records the counters and installs an empty page image
//     under the table's lock; nothing is copied.
//   - From then on, the first change to a page (an insert into one of its
//     free slots, a sample, a priority update, a delete, a Reset) copies
//     the page into the image before changing it.
//   - Capture copies the pages nobody changed, one page per lock hold, and
//     uninstalls the image.
//
// A copy is shallow: items point to trajectories and chunks that never
// change, and the snapshot keeps them reachable (through Go's collector,
// without chunk references) after the table lets them go; chunks of a
// tiered store, whose data would be deleted, stay pinned until Release,
// and chunks whose buffers the store would reuse are left to the
// collector (chunkstore.Chunk.KeepForSnapshot). So the image is
// the table exactly as it was at BeginSnapshots, at the cost of one copy
// of the item headers and lock holds of one page copy each.
type Snapshot struct {
	t    *Table
	snap *pageSnapshot
	// Info is the table at the instant of the snapshot: options, counters
	// and size.
	Info Info
	// Stats describes the copying; complete after Capture.
	Stats SnapshotStats
	live  bool // counted in the table's liveSnapshots until Release
}

// SnapshotStats describes the cost of a snapshot.
type SnapshotStats struct {
	// Pages is the number of pages the table had at the snapshot.
	Pages int
	// CopiedOnWrite counts the pages that table operations copied before
	// changing them; Capture copied the others.
	CopiedOnWrite int
	// Capture is how long Capture took, and MaxHold its longest hold of
	// the table's lock (one page copy).
	Capture, MaxHold time.Duration
}

// BeginSnapshots starts a snapshot of every table at one instant: it holds
// all their locks at once, in the order given, while it records their
// counters and installs their copy-on-write images. Callers that begin
// snapshots of several tables must always list them in the same order (by
// name, say); no other table operation holds two table locks.
//
// Each snapshot must then be completed with Capture, which also stops the
// copying on writes. It fails with ErrClosed or ErrSnapshotInProgress, and
// then starts nothing.
func BeginSnapshots(ts ...*Table) ([]*Snapshot, error) {
	return BeginSnapshotsAt(nil, ts...)
}

// BeginSnapshotsAt is BeginSnapshots that also calls at, if not nil, at the
// instant of the snapshots: with every table's lock held, after the
// snapshots are installed. The write-ahead log marks its position there.
// at must not call into the tables.
func BeginSnapshotsAt(at func(), ts ...*Table) ([]*Snapshot, error) {
	for i, t := range ts {
		if slices.Index(ts[:i], t) >= 0 {
			return nil, fmt.Errorf("table %q: listed twice", t.name)
		}
	}
	for _, t := range ts {
		t.mu.Lock()
	}
	defer func() {
		for _, t := range slices.Backward(ts) {
			t.mu.Unlock()
		}
	}()
	for _, t := range ts {
		switch {
		case t.mu.closed:
			return nil, fmt.Errorf("table %q: %w", t.name, ErrClosed)
		case t.mu.items.snap != nil:
			return nil, fmt.Errorf("table %q: %w", t.name, ErrSnapshotInProgress)
		case t.mu.restoring:
			return nil, fmt.Errorf("table %q: restore in progress", t.name)
		}
	}
	out := make([]*Snapshot, len(ts))
	for i, t := range ts {
		out[i] = &Snapshot{t: t, snap: t.mu.items.installSnapshot(), Info: t.infoLocked(), live: true}
		t.mu.liveSnapshots++
		t.mu.snapSeq = t.mu.nextSeq
		if t.hooks.onSnapshot != nil {
			t.hooks.onSnapshot()
		}
	}
	if at != nil {
		at()
	}
	return out, nil
}

// Capture copies the pages the snapshot still misses, taking the table's
// lock once per page, and uninstalls the image: the table stops copying on
// writes. Calling it again does nothing.
func (s *Snapshot) Capture() {
	if s.snap == nil {
		return
	}
	t := s.t
	start := time.Now()
	var buf []Item
	for p := 0; ; p++ {
		// Allocate (and zero) outside the lock: under it, only the copy.
		if buf == nil {
			buf = make([]Item, pageSize)
		}
		t.mu.Lock()
		if t.mu.items.snap != s.snap {
			t.mu.Unlock()
			return
		}
		if p >= len(s.snap.pages) || s.snap.missing == 0 {
			t.mu.items.snap = nil
			s.Stats.Pages = len(s.snap.pages)
			s.Stats.CopiedOnWrite = s.snap.copied
			t.mu.Unlock()
			s.Stats.Capture = time.Since(start)
			return
		}
		if t.mu.items.needsCapture(p) {
			held := time.Now()
			t.mu.items.captureInto(p, buf)
			buf = nil
			s.Stats.MaxHold = max(s.Stats.MaxHold, time.Since(held))
		}
		t.mu.Unlock()
		if t.hooks.onCapture != nil {
			t.hooks.onCapture(p)
		}
	}
}

// Len is the number of items in the snapshot.
func (s *Snapshot) Len() int { return int(s.Info.Size) }

// Items yields the snapshot's items in Seq order (insertion order). It must
// follow Capture, and can be iterated once. The items are the snapshot's
// own: callers must not modify them or keep them past the yield. Once an
// item is yielded, the snapshot forgets it, so that the trajectories and
// chunks of items the table has deleted since the snapshot can be freed
// as a checkpoint passes them rather than at Release: under load, a
// checkpoint then holds the data of the items evicted ahead of it, not
// of every item evicted while it runs.
func (s *Snapshot) Items() iter.Seq[*Item] {
	type entry struct {
		seq  uint64
		item *Item
	}
	return func(yield func(*Item) bool) {
		if s.snap == nil {
			return
		}
		if s.snap.missing > 0 {
			panic("table: Snapshot.Items before Capture")
		}
		idx := make([]entry, 0, s.Len())
		for _, page := range s.snap.pages {
			for i := range page {
				if it := &page[i]; it.Trajectory != nil {
					idx = append(idx, entry{it.Seq, it})
				}
			}
		}
		slices.SortFunc(idx, func(a, b entry) int {
			switch {
			case a.seq < b.seq:
				return -1
			case a.seq > b.seq:
				return 1
			}
			return 0
		})
		for i, e := range idx {
			if !yield(e.item) {
				return
			}
			*e.item = Item{}
			idx[i].item = nil
		}
	}
}

// Release drops the snapshot's copy of the items, and the pins that kept
// the data of chunks of items deleted since the snapshot readable. It must
// be called once the items were read; calling it again does nothing.
func (s *Snapshot) Release() {
	s.Capture()
	s.snap = nil
	if !s.live {
		return
	}
	s.live = false
	t := s.t
	t.mu.Lock()
	t.mu.liveSnapshots--
	var pinned []*chunkstore.Chunk
	if t.mu.liveSnapshots == 0 {
		pinned, t.mu.pinned = t.mu.pinned, nil
	}
	t.mu.Unlock()
	for _, c := range pinned {
		c.Unpin()
	}
}
