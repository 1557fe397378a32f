package table

import (
	"sync/atomic"
	"time"
)

// WaitBuckets are the upper bounds, in seconds, of the buckets of a
// table's wait histograms (Table.Waits).
var WaitBuckets = [...]float64{0.001, 0.01, 0.1, 1, 10, 60}

// WaitStats is a histogram of the waits of calls that found the rate
// limiter closed: Counts[i] waits took at most WaitBuckets[i] and more
// than the bucket before; Counts[len(WaitBuckets)] took longer than the
// last bucket. A wait ends when the call is admitted or gives up (its
// context, its timeout, the table closing). Calls admitted at once are
// not counted.
type WaitStats struct {
	Counts [len(WaitBuckets) + 1]int64
	Sum    time.Duration
}

// Count is the number of waits.
func (w WaitStats) Count() int64 {
	var n int64
	for _, c := range w.Counts {
		n += c
	}
	return n
}

// waitHistogram is a WaitStats kept with atomics, so that a caller that
// waited records it without the table's lock.
type waitHistogram struct {
	counts [len(WaitBuckets) + 1]atomic.Int64
	sum    atomic.Int64 // nanoseconds
}

// since records a wait that began at start.
func (h *waitHistogram) since(start time.Time) {
	d := time.Since(start)
	s, i := d.Seconds(), 0
	for i < len(WaitBuckets) && s > WaitBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

func (h *waitHistogram) snapshot() WaitStats {
	var w WaitStats
	for i := range h.counts {
		w.Counts[i] = h.counts[i].Load()
	}
	w.Sum = time.Duration(h.sum.Load())
	return w
}

// Waits returns the histograms of how long inserts and samples waited on
// the rate limiter, since the table was made.
func (t *Table) Waits() (inserts, samples WaitStats) {
	return t.insertWaits.snapshot(), t.sampleWaits.snapshot()
}
