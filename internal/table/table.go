// Package table implements a replay table: items, the selectors that pick
// them, the rate limiter that paces inserts against samples, and the waiting
// that the rate limiter imposes.
//
// A Table is safe for concurrent use. One mutex guards all of a table's
// state, so every operation is atomic and linearisable. Blocked inserts and
// samples wait in two FIFO queues; whoever changes the table admits the
// queue heads that became admissible, so no goroutine polls and waiters are
// served in arrival order (a blocked head blocks everything behind it, as in
// Reverb). Every wait ends on its context, on the sample timeout, or when the
// table is closed. The table starts no goroutines.
package table

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/prefetch"
	"github.com/reverie-rl/reverie/internal/ratelimit"
	"github.com/reverie-rl/reverie/selector"
)

// Errors returned by Table methods.
var (
	// ErrClosed is returned to every waiter and caller once Close is called.
	ErrClosed = errors.New("table: closed")
	// ErrRateLimiterTimeout is returned by Sample when its timeout expires
	// before the first sample could be taken.
	ErrRateLimiterTimeout = errors.New("table: rate limiter timeout")
	// ErrInvalidPriority wraps the selectors' complaint about a priority.
	ErrInvalidPriority = selector.ErrInvalidPriority
	// ErrInvalidItem is returned for an item the table cannot hold.
	ErrInvalidItem = errors.New("table: invalid item")
)

// Config configures a Table.
type Config struct {
	Name string
	// Sampler and Remover are owned by the table from now on.
	Sampler selector.Selector
	Remover selector.Selector
	// MaxSize is the most items the table holds; > 0.
	MaxSize int64
	// MaxTimesSampled deletes an item once sampled this many times; <= 0
	// means never.
	MaxTimesSampled int32
	RateLimiter     ratelimit.Config
	Extensions      []Extension
	// Now returns Unix nanoseconds; nil means time.Now.
	Now func() int64
}

// Sampled is one item as a sample returns it: a copy of the item's fields
// at sampling time, and the chunks it references. Chunk data is immutable,
// and the sample pins the chunks (see chunkstore.Chunk.Pin), so their data
// stays readable after the item leaves the table, until Unpin.
type Sampled struct {
	Item        Item
	Probability float64
	// TableSize counts the table before any deletion this sample caused.
	TableSize int64
	// RateLimited reports that the sample had to wait for the rate limiter.
	RateLimited bool
}

// Unpin drops the sample's pins on its chunks. Call it once the chunks'
// data was read (or will not be).
func (s *Sampled) Unpin() {
	for _, c := range s.Item.Chunks {
		c.Unpin()
	}
}

// KeyPriority is a priority update.
type KeyPriority struct {
	Key      uint64
	Priority float64
}

// Table is a replay table. See the package doc.
type Table struct {
	name            string
	maxSize         int64
	maxTimesSampled int32
	exts            []Extension
	now             func() int64

	mu struct {
		sync.Mutex
		closed             bool
		keys               *keyIndex         // item key -> slot in items
		touched            uint64            // drawAheadLocked's reads, kept so they are not dropped
		victims            []selector.Slot   // Prefetch's scratch
		ahead              []selector.Choice // drawAheadLocked's buffers
		aheadChunks        []*chunkstore.Chunk
		items              slab
		sampler            selector.Selector
		remover            selector.Selector
		limiter            *ratelimit.Limiter
		episodes           map[uint64]int64 // episode id -> chunk refs of live items
		numDeletedEpisodes int64
		numUniqueSamples   int64
		nextSeq            uint64 // Seq of the next new item
		restoring          bool   // between BeginRestore and FinishRestore
		inserts            waitQueue[*insertWaiter]
		samples            waitQueue[*sampleWaiter]
		// liveSnapshots counts snapshots begun and not yet released; while
		// there are any, pinned holds the tiered store's chunks of items
		// dropped since which a snapshot may still show: those numbered
		// below snapSeq, nextSeq when the newest live snapshot began.
		liveSnapshots int
		snapSeq       uint64
		pinned        []*chunkstore.Chunk
	}

	// How long callers waited on the rate limiter (waits.go).
	insertWaits, sampleWaits waitHistogram

	// hooks lets tests of this package observe snapshots at exact points.
	hooks struct {
		onSnapshot func()         // under the lock, as a snapshot is installed
		onCapture  func(page int) // without the lock, after Capture copied page
	}
}

type insertWaiter struct {
	item Item
	done chan struct{}
	err  error
}

type sampleWaiter struct {
	// ctx is the caller's: a waiter whose caller has gone is not served,
	// since what sampling changes (times_sampled, the rate limiter, a
	// delete at max_times_sampled) would be spent on samples nobody reads.
	ctx  context.Context
	want int
	out  []Sampled
	done chan struct{}
	err  error
}

// New returns an empty table. cfg must be valid (see Config).
func New(cfg Config) (*Table, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("table: empty name")
	case cfg.Sampler == nil || cfg.Remover == nil:
		return nil, fmt.Errorf("table %q: sampler and remover are required", cfg.Name)
	case cfg.MaxSize <= 0:
		return nil, fmt.Errorf("table %q: max_size must be > 0, got %d", cfg.Name, cfg.MaxSize)
	}
	if err := cfg.RateLimiter.Validate(); err != nil {
		return nil, fmt.Errorf("table %q: %w", cfg.Name, err)
	}
	t := &Table{
		name:            cfg.Name,
		maxSize:         cfg.MaxSize,
		maxTimesSampled: cfg.MaxTimesSampled,
		exts:            cfg.Extensions,
		now:             cfg.Now,
	}
	if t.now == nil {
		t.now = func() int64 { return time.Now().UnixNano() }
	}
	t.mu.keys = newKeyIndex(randSeed())
	t.mu.sampler = cfg.Sampler
	t.mu.remover = cfg.Remover
	t.mu.limiter = ratelimit.New(cfg.RateLimiter)
	t.mu.episodes = make(map[uint64]int64)
	return t, nil
}

// Name is the table's name.
func (t *Table) Name() string { return t.name }

// Prefetch warms the caches for the items with keys about to be inserted,
// one by one, by Insert: in a large table every index lookup is a cache
// miss, and fetching the lines of a whole batch first overlaps the misses
// instead of paying them in turn. It asks for the key index entries of
// the new keys and, when the remover is FIFO and the batch will evict,
// for everything the evictions will read: the oldest items' slots, their
// key index entries, their chunks and the chunk store's index entries of
// those. It changes nothing; keys may be in any table.
func (t *Table) Prefetch(keys []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		t.mu.keys.prefetch(k)
	}
	o, ok := t.mu.remover.(selector.Orderer)
	evict := int64(t.mu.keys.len()) + int64(len(keys)) - t.maxSize
	if !ok || evict <= 0 {
		return
	}
	victims := t.mu.victims[:0]
	o.Oldest(int(min(evict, int64(len(keys)))), func(s selector.Slot) {
		it := t.mu.items.at(s)
		prefetch.Line(unsafe.Pointer(&it.Key))
		prefetch.Line(unsafe.Pointer(&it.Chunks))
		victims = append(victims, s)
	})
	t.mu.victims = victims
	for _, s := range victims {
		it := t.mu.items.at(s)
		t.mu.keys.prefetchDelete(it.Key)
		for _, c := range it.Chunks {
			prefetch.Line(unsafe.Pointer(c))
		}
	}
	for _, s := range victims {
		for _, c := range t.mu.items.at(s).Chunks {
			c.PrefetchIndex()
		}
	}
}

// CheckPriority reports whether the table's selectors accept priority.
func (t *Table) CheckPriority(priority float64) error {
	if math.IsNaN(priority) {
		return fmt.Errorf("%w: priority is NaN", ErrInvalidPriority)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checkPriorityLocked(priority)
}

func (t *Table) checkPriorityLocked(priority float64) error {
	if math.IsNaN(priority) {
		return fmt.Errorf("%w: priority is NaN", ErrInvalidPriority)
	}
	if err := t.mu.sampler.CheckPriority(priority); err != nil {
		return err
	}
	return t.mu.remover.CheckPriority(priority)
}

// Insert adds item, waiting while the rate limiter forbids it. An item
// whose key is already present updates that item's priority instead (its
// trajectory is ignored), as Reverb treats a re-sent item. The table stamps
// InsertedAt and zeroes TimesSampled.
//
// On success the table owns the references in item.Chunks. On error the
// caller keeps them. Insert returns ctx's error if ctx ends first, and
// ErrClosed if the table closes.
func (t *Table) Insert(ctx context.Context, item Item) error {
	if len(item.Trajectory) == 0 {
		return fmt.Errorf("%w: item %d has no columns", ErrInvalidItem, item.Key)
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	if err := t.checkPriorityLocked(item.Priority); err != nil {
		t.mu.Unlock()
		return err
	}
	if t.mu.inserts.len() == 0 && t.mu.limiter.CanInsert() {
		t.applyInsertLocked(&item)
		t.pumpLocked()
		t.mu.Unlock()
		return nil
	}
	w := &insertWaiter{item: item, done: make(chan struct{})}
	t.mu.inserts.push(w)
	t.mu.Unlock()
	defer t.insertWaits.since(time.Now())

	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.inserts.remove(w) {
		return ctx.Err()
	}
	// Admitted while we were giving up: the item is in the table.
	return w.err
}

// Sample returns between 1 and n samples. It waits for the first one while
// the rate limiter forbids sampling, then takes as many more as the limiter
// allows without waiting. timeout < 0 waits until ctx ends; timeout == 0
// fails at once with ErrRateLimiterTimeout when nothing can be sampled now;
// timeout > 0 bounds the wait.
func (t *Table) Sample(ctx context.Context, n int, timeout time.Duration) ([]Sampled, error) {
	return t.SampleInto(ctx, nil, n, timeout)
}

// SampleInto is Sample, but it puts the samples in dst's memory (from
// dst[:0]) when they fit, so that a caller sampling over and over can reuse
// one buffer rather than allocate a slice per call, which on a busy
// sampling stream is most of what the server allocates. The caller must
// be done with the samples in dst before the call; on error the returned
// slice is nil and dst's contents are undefined.
func (t *Table) SampleInto(ctx context.Context, dst []Sampled, n int, timeout time.Duration) ([]Sampled, error) {
	if n <= 0 {
		return nil, fmt.Errorf("table: Sample of %d items", n)
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	if t.mu.samples.len() == 0 {
		out := t.sampleLocked(dst[:0], n, false)
		if len(out) > 0 {
			t.pumpLocked()
			t.mu.Unlock()
			return out, nil
		}
	}
	if timeout == 0 {
		t.mu.Unlock()
		return nil, ErrRateLimiterTimeout
	}
	w := &sampleWaiter{ctx: ctx, want: n, out: dst[:0], done: make(chan struct{})}
	t.mu.samples.push(w)
	t.mu.Unlock()
	defer t.sampleWaits.since(time.Now())

	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	var err error
	select {
	case <-w.done:
		return w.result()
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = ErrRateLimiterTimeout
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.samples.remove(w) {
		return nil, err
	}
	// Answered while we were giving up. If the samples were taken, return
	// them rather than lose their side effects.
	return w.result()
}

func (w *sampleWaiter) result() ([]Sampled, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.out, nil
}

// drawAheadMin is the smallest batch drawAheadLocked draws ahead for, and
// drawAheadMax the largest.
const (
	drawAheadMin = 4
	drawAheadMax = 256
)

// drawAheadLocked draws up to n samples' choices before any is taken, and
// reads the cache lines that taking and sending them will touch (the
// item's slot, its trajectory, its chunk list, its chunks and the start
// of their encodings), one kind at a time, so that the CPU fetches the
// lines of the whole batch in parallel rather than missing on each sample
// in turn: in a large table these misses are most of the cost of
// sampling. It returns nil, and sampling draws one choice at a time, when
// taking a sample can delete an item (max_times_sampled), since a later
// choice could then name a deleted slot. Otherwise nothing that sampling
// changes (times_sampled, the rate limiter, the extensions) affects what
// the selectors draw, so drawing ahead does not change the distribution;
// choices left unused when the rate limiter stops are dropped.
func (t *Table) drawAheadLocked(n int) []selector.Choice {
	if t.maxTimesSampled > 0 || n < drawAheadMin || !t.mu.limiter.CanSample() {
		return nil
	}
	n = min(n, drawAheadMax)
	ahead := t.mu.ahead[:0]
	for range n {
		c, err := t.mu.sampler.Sample()
		if err != nil {
			break
		}
		ahead = append(ahead, c)
	}
	t.mu.ahead = ahead
	var sink uint64
	for _, c := range ahead {
		sink ^= t.mu.items.at(c.Slot).Key
	}
	chunks := t.mu.aheadChunks[:0]
	for _, c := range ahead {
		it := t.mu.items.at(c.Slot)
		chunks = append(chunks, it.Chunks...)
		if len(it.Trajectory) > 0 {
			sink ^= uint64(it.Trajectory[0])
		}
	}
	for _, ch := range chunks {
		sink ^= ch.Touch()
	}
	clear(chunks)
	t.mu.aheadChunks = chunks[:0]
	t.mu.touched = sink
	return ahead
}

// sampleLocked appends up to n-len(out) samples to out while the rate
// limiter admits them.
func (t *Table) sampleLocked(out []Sampled, n int, rateLimited bool) []Sampled {
	if out == nil {
		out = make([]Sampled, 0, min(n, t.mu.keys.len()))
	}
	ahead := t.drawAheadLocked(n - len(out))
	for len(out) < n && t.mu.keys.len() > 0 && t.mu.limiter.CanSample() {
		var choice selector.Choice
		if len(ahead) > 0 {
			choice, ahead = ahead[0], ahead[1:]
		} else {
			c, err := t.mu.sampler.Sample()
			if err != nil {
				break
			}
			choice = c
		}
		item := t.mu.items.mutable(choice.Slot)
		item.TimesSampled++
		if item.TimesSampled == 1 {
			t.mu.numUniqueSamples++
		}
		t.mu.limiter.Sample()
		for _, c := range item.Chunks {
			c.Pin()
		}
		out = append(out, Sampled{
			Item:        *item,
			Probability: choice.Probability,
			TableSize:   int64(t.mu.keys.len()),
			RateLimited: rateLimited,
		})
		for _, e := range t.exts {
			e.OnSample(item)
		}
		if t.maxTimesSampled > 0 && item.TimesSampled >= t.maxTimesSampled {
			t.deleteLocked(choice.Slot)
		}
	}
	return out
}

// dropChunksLocked drops the references to its chunks of the item numbered
// seq. While a snapshot that may show the item is live (one begun after
// the item was inserted), the chunks are kept for it
// (Chunk.KeepForSnapshot): those of a tiered store stay pinned until the
// last live snapshot is released; chunks in memory need no pin, as the
// snapshot's copy of the item keeps them reachable until the snapshot has
// yielded it, but their buffers are then left to the collector rather than
// reused. Items inserted after the newest live snapshot began are in none.
func (t *Table) dropChunksLocked(seq uint64, cs []*chunkstore.Chunk) {
	if t.mu.liveSnapshots > 0 && seq < t.mu.snapSeq {
		for _, c := range cs {
			if c.KeepForSnapshot() {
				t.mu.pinned = append(t.mu.pinned, c)
			}
		}
	}
	for _, c := range cs {
		c.Unref()
	}
}

// applyInsertLocked puts item in the table. The rate limiter has admitted it.
func (t *Table) applyInsertLocked(item *Item) {
	if slot, ok := t.mu.keys.get(item.Key); ok {
		old := t.mu.items.mutable(slot)
		prev := old.Priority
		old.Priority = item.Priority
		t.updateSelectorsLocked(slot, old.Priority)
		for _, c := range item.Chunks {
			c.Unref()
		}
		for _, e := range t.exts {
			e.OnUpdate(old, prev)
		}
		return
	}
	item.InsertedAt = t.now()
	item.TimesSampled = 0
	it := t.addLocked(item)
	t.mu.limiter.Insert()
	for _, e := range t.exts {
		e.OnInsert(it)
	}
	if int64(t.mu.keys.len()) > t.maxSize {
		if victim, err := t.mu.remover.Sample(); err == nil {
			t.deleteLocked(victim.Slot)
		}
	}
}

// addLocked puts a new item in a free slot with the next Seq and indexes
// it: key, sampler, remover and episodes. The caller has checked its
// priority and that its key is not in the table; it counts the item in the
// rate limiter and runs the extensions.
func (t *Table) addLocked(item *Item) *Item {
	slot, it := t.mu.items.alloc()
	*it = *item
	it.Seq = t.mu.nextSeq
	t.mu.nextSeq++
	t.mu.keys.put(it.Key, slot)
	// Priorities were checked and slots are new, so neither selector can
	// refuse.
	if err := t.mu.sampler.Insert(slot, it.Priority); err != nil {
		panic(fmt.Sprintf("table %q: sampler refused checked item: %v", t.name, err))
	}
	if err := t.mu.remover.Insert(slot, it.Priority); err != nil {
		panic(fmt.Sprintf("table %q: remover refused checked item: %v", t.name, err))
	}
	for _, c := range it.Chunks {
		t.mu.episodes[c.EpisodeID()]++
	}
	return it
}

func (t *Table) updateSelectorsLocked(slot selector.Slot, priority float64) {
	if err := t.mu.sampler.Update(slot, priority); err != nil {
		panic(fmt.Sprintf("table %q: sampler refused checked update: %v", t.name, err))
	}
	if err := t.mu.remover.Update(slot, priority); err != nil {
		panic(fmt.Sprintf("table %q: remover refused checked update: %v", t.name, err))
	}
}

// deleteLocked removes the item in slot and drops its chunk references.
func (t *Table) deleteLocked(slot selector.Slot) {
	item := t.mu.items.mutable(slot)
	t.mu.keys.delete(item.Key)
	_ = t.mu.sampler.Delete(slot)
	_ = t.mu.remover.Delete(slot)
	for _, c := range item.Chunks {
		ep := c.EpisodeID()
		if n := t.mu.episodes[ep] - 1; n > 0 {
			t.mu.episodes[ep] = n
		} else {
			delete(t.mu.episodes, ep)
			t.mu.numDeletedEpisodes++
		}
	}
	t.mu.limiter.Delete()
	for _, e := range t.exts {
		e.OnDelete(item)
	}
	t.dropChunksLocked(item.Seq, item.Chunks)
	t.mu.items.release(slot)
}

// pumpLocked admits queued inserts and samples until neither queue's head
// can make progress. Every change to the table ends with it.
func (t *Table) pumpLocked() {
	for {
		progressed := false
		if w, ok := t.mu.inserts.peek(); ok && t.mu.limiter.CanInsert() {
			t.mu.inserts.pop()
			t.applyInsertLocked(&w.item)
			close(w.done)
			progressed = true
		}
		if w, ok := t.mu.samples.peek(); ok && w.ctx.Err() != nil {
			// Its caller has gone and will find it answered with the
			// context's error; serve the waiters behind it.
			t.mu.samples.pop()
			w.err = w.ctx.Err()
			close(w.done)
			progressed = true
		} else if ok {
			w.out = t.sampleLocked(w.out, w.want, true)
			if len(w.out) > 0 {
				t.mu.samples.pop()
				close(w.done)
				progressed = true
			}
		}
		if !progressed {
			return
		}
	}
}

// MutatePriorities deletes the items with keys in deletes, then sets the
// priorities in updates. Missing keys are ignored. Every priority is checked
// first: if one is invalid nothing changes.
func (t *Table) MutatePriorities(updates []KeyPriority, deletes []uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return ErrClosed
	}
	for i, u := range updates {
		if err := t.checkPriorityLocked(u.Priority); err != nil {
			return fmt.Errorf("updates[%d].priority (key %d): %w", i, u.Key, err)
		}
	}
	for _, k := range deletes {
		if slot, ok := t.mu.keys.get(k); ok {
			t.deleteLocked(slot)
		}
	}
	for _, u := range updates {
		slot, ok := t.mu.keys.get(u.Key)
		if !ok {
			continue
		}
		item := t.mu.items.mutable(slot)
		prev := item.Priority
		item.Priority = u.Priority
		t.updateSelectorsLocked(slot, item.Priority)
		for _, e := range t.exts {
			e.OnUpdate(item, prev)
		}
	}
	t.pumpLocked()
	return nil
}

// Reset removes every item and zeroes the counters. Queued inserts and
// samples stay queued and are admitted again by the fresh counters.
func (t *Table) Reset() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return ErrClosed
	}
	// Reported before the chunks go, as a delete is: a log must record
	// the reset before a client can use a released chunk's key again.
	for _, e := range t.exts {
		e.OnReset()
	}
	t.mu.keys.all(func(_ uint64, slot selector.Slot) {
		it := t.mu.items.at(slot)
		t.dropChunksLocked(it.Seq, it.Chunks)
	})
	t.mu.keys.reset()
	t.mu.items.reset() // completes an installed snapshot first
	t.mu.sampler.Clear()
	t.mu.remover.Clear()
	t.mu.limiter.Reset()
	clear(t.mu.episodes)
	t.mu.numDeletedEpisodes = 0
	t.mu.numUniqueSamples = 0
	t.pumpLocked()
	return nil
}

// Close fails every waiter and later call with ErrClosed. Items stay in the
// table until Release. Close is idempotent.
func (t *Table) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return
	}
	t.mu.closed = true
	for w, ok := t.mu.inserts.pop(); ok; w, ok = t.mu.inserts.pop() {
		w.err = ErrClosed
		close(w.done)
	}
	for w, ok := t.mu.samples.pop(); ok; w, ok = t.mu.samples.pop() {
		w.err = ErrClosed
		close(w.done)
	}
}

// Info is a snapshot of a table's configuration and counters.
type Info struct {
	Name               string
	Sampler, Remover   selector.Spec
	MaxSize            int64
	MaxTimesSampled    int32
	RateLimiter        ratelimit.Config
	Inserts            int64
	Samples            int64
	Deletes            int64
	Size               int64
	NumEpisodes        int64
	NumDeletedEpisodes int64
	NumUniqueSamples   int64
	// PendingInserts and PendingSamples count blocked callers.
	PendingInserts int
	PendingSamples int
}

// Info returns a snapshot of the table.
func (t *Table) Info() Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.infoLocked()
}

func (t *Table) infoLocked() Info {
	ins, smp, del := t.mu.limiter.Counts()
	return Info{
		Name:               t.name,
		Sampler:            t.mu.sampler.Spec(),
		Remover:            t.mu.remover.Spec(),
		MaxSize:            t.maxSize,
		MaxTimesSampled:    t.maxTimesSampled,
		RateLimiter:        t.mu.limiter.Config(),
		Inserts:            ins,
		Samples:            smp,
		Deletes:            del,
		Size:               int64(t.mu.keys.len()),
		NumEpisodes:        int64(len(t.mu.episodes)),
		NumDeletedEpisodes: t.mu.numDeletedEpisodes,
		NumUniqueSamples:   t.mu.numUniqueSamples,
		PendingInserts:     t.mu.inserts.len(),
		PendingSamples:     t.mu.samples.len(),
	}
}

// Len is the number of items in the table.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.keys.len()
}
