// Package wal is reverie's write-ahead log: the record of every change to
// the tables since the last checkpoint, so that a server that crashes can
// be rebuilt from its newest checkpoint plus the log.
//
// Tables report their changes through an Extension (one per table), under
// their own locks, so the log holds each table's changes in the order the
// table made them. Appending only queues a record in memory; one writer
// goroutine encodes what has queued, writes it in one write call and, by
// the sync policy, fsyncs it: every append that arrived while the previous
// batch was being written rides the next write (group commit). Callers wait
// with WaitDurable before they answer: until the change is on disk under
// SyncAlways, and until it is written to the file under the other
// policies, so that a crash of the process never loses an answered change.
//
// Records are numbered from 1 by a log sequence number (LSN). A checkpoint
// records the LSN of the last change it holds (Mark); once it is durable,
// Cut removes the segment files that hold only records at or before it.
// docs/formats.md describes the files byte by byte.
package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
)

// Sync is the fsync policy.
type Sync int

// The fsync policies.
const (
	// SyncAlways fsyncs every batch before WaitDurable returns: a change is
	// acknowledged only once it is on disk.
	SyncAlways Sync = iota + 1
	// SyncInterval returns from WaitDurable once a change is written to
	// the file (a crash of the process loses nothing answered), and a
	// goroutine of its own fsyncs the file every Interval, so that writes
	// never wait for an fsync: a crash of the machine loses about the
	// last Interval.
	SyncInterval
	// SyncNever returns from WaitDurable once a change is written, and
	// leaves fsync to the operating system (and to segment rotation and
	// Close).
	SyncNever
)

func (s Sync) String() string {
	switch s {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("Sync(%d)", int(s))
}

// ParseSync parses "always", "interval" or "never".
func ParseSync(s string) (Sync, error) {
	switch s {
	case "always":
		return SyncAlways, nil
	case "interval":
		return SyncInterval, nil
	case "never":
		return SyncNever, nil
	}
	return 0, fmt.Errorf("unknown fsync policy %q: want always, interval or never", s)
}

// Defaults.
const (
	DefaultInterval     = 100 * time.Millisecond
	DefaultSegmentBytes = 64 << 20
)

// Options configures a Log.
type Options struct {
	// Dir holds the segment files. It is created if missing.
	Dir string
	// Sync is the fsync policy; required.
	Sync Sync
	// Interval bounds the time between fsyncs under SyncInterval; zero
	// means DefaultInterval.
	Interval time.Duration
	// SegmentBytes starts a new segment file once the current one is this
	// large; zero means DefaultSegmentBytes.
	SegmentBytes int64
	// SizeTrigger, if > 0, makes the writer call OnSize (from its own
	// goroutine, once per Mark) when the records written since the last
	// Mark pass this many bytes. The server takes a checkpoint then, which
	// lets the log be cut.
	SizeTrigger int64
	OnSize      func()
	// Logger receives the log's warnings. Nil means slog.Default().
	Logger *slog.Logger
}

// Errors.
var (
	// ErrClosed is returned by WaitDurable once the log is closed.
	ErrClosed = errors.New("wal: closed")
	// ErrCorrupt is wrapped by every error that says a log file is
	// damaged, other than a torn final record.
	ErrCorrupt = errors.New("wal: corrupt")
)

// Op is the kind of a record.
type Op byte

// The record kinds. docs/formats.md gives their payloads.
const (
	OpChunk  Op = 1 // a chunk, logged before the first item that needs it
	OpInsert Op = 2 // a new item
	OpUpdate Op = 3 // a priority change
	OpSample Op = 4 // an item was sampled; its new times_sampled
	OpDelete Op = 5 // an item left its table
	OpReset  Op = 6 // a table was reset
)

func (o Op) String() string {
	switch o {
	case OpChunk:
		return "chunk"
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpSample:
		return "sample"
	case OpDelete:
		return "delete"
	case OpReset:
		return "reset"
	}
	return fmt.Sprintf("op %d", byte(o))
}

// entry is a queued record. It holds what the record needs (the item's
// fields, a reference to the chunk), and is encoded by the writer.
type entry struct {
	op           Op
	table        string
	key          uint64
	priority     float64
	timesSampled int32
	insertedAt   int64
	traj         []byte            // the table's encoding of a FlatTrajectory
	chunk        *chunkstore.Chunk // OpChunk; the entry holds a reference
}

// Log is a write-ahead log. Create it with New, attach Extension to every
// table, replay the old log with Replay, then Start it. Safe for concurrent
// use.
type Log struct {
	opts Options
	log  *slog.Logger

	mu struct {
		sync.Mutex
		active   bool   // between Start and Close: appends are kept
		closed   bool   // Close was called
		next     uint64 // LSN of the next record appended
		pending  []entry
		spare    []entry
		logged   map[uint64]uint64 // key to Chunk.ID of the chunks logged since the last Mark
		written  uint64            // last LSN written to the file
		durable  uint64            // last LSN fsynced
		err      error             // the first write or sync error
		progress chan struct{}     // closed and replaced when written or durable advance
		rotateAt uint64            // start a new segment after this LSN (a Mark); 0 if none
		cutAt    uint64            // remove segments wholly at or before this LSN
		sinceMk  int64             // bytes written since the last Mark
		fired    bool              // OnSize called since the last Mark
	}
	wake chan struct{}
	done chan struct{}
	// cur is the file of the writer's current segment, for the syncer:
	// the writer stores it whenever it starts a segment.
	cur atomic.Pointer[os.File]
	// failed is set with mu.err, so that Err, called for every insert,
	// does not take the lock while the log is sound.
	failed atomic.Bool

	// testHookWrite, if set before Start, is called by the writer with
	// each batch taken, before it writes it.
	testHookWrite func()
	// testHookSync, if set before Start, is called by the syncer before
	// each fsync.
	testHookSync func()

	lock io.Closer // from Lock; released by Close

	// Owned by the writer goroutine.
	seg     *segment
	buf     []byte
	cutDone uint64 // the mark of the last cut that got through
}

// New returns a Log that keeps nothing until Start. It touches no files.
func New(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("wal: no directory")
	}
	if opts.Sync < SyncAlways || opts.Sync > SyncNever {
		return nil, fmt.Errorf("wal: bad sync policy %v", opts.Sync)
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	l := &Log{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.mu.logged = make(map[uint64]uint64)
	l.mu.progress = make(chan struct{})
	return l, nil
}

// Sync is the log's fsync policy.
func (l *Log) Sync() Sync { return l.opts.Sync }

// SizeTrigger is Options.SizeTrigger.
func (l *Log) SizeTrigger() int64 { return l.opts.SizeTrigger }

// Dir is the log's directory.
func (l *Log) Dir() string { return l.opts.Dir }

// LockFile names the file in the log's directory that a Log holds locked
// from Lock to Close, so that a second server pointed at the same
// directory fails to start rather than replay, cut and overwrite the
// first one's log. It is not the checkpoint directory's LOCK, so that
// the log may live in the checkpoint directory itself.
const LockFile = "WAL.LOCK"

// ErrLocked is returned by Lock when another Log, in this process or
// another, holds the directory.
var ErrLocked = errors.New("wal: directory is in use by another server")

// Lock creates the log's directory if needed and locks it until Close. A
// server takes it before it replays the log.
func (l *Log) Lock() error {
	if err := mkdirDurable(l.opts.Dir); err != nil {
		return err
	}
	// Through symbolic links: the process's lock registry goes by name.
	dir, err := filepath.EvalSymlinks(l.opts.Dir)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	lock, err := vfs.Default.Lock(filepath.Join(dir, LockFile))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrLocked, l.opts.Dir, err)
	}
	l.lock = lock
	return nil
}

// Start opens a new segment after last, the LSN of the last record the
// server holds the effect of (from its checkpoint and Replay), and starts
// keeping appends.
func (l *Log) Start(last uint64) error {
	if err := mkdirDurable(l.opts.Dir); err != nil {
		return err
	}
	seg, err := createSegment(l.opts.Dir, last+1)
	if err != nil {
		return err
	}
	l.seg = seg
	l.cur.Store(seg.f)
	l.mu.Lock()
	l.mu.next = last + 1
	l.mu.written, l.mu.durable = last, last
	l.mu.active = true
	l.mu.Unlock()
	go l.run()
	return nil
}

// Last is the LSN of the last record appended.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.next - 1
}

// Err is the error that stopped the log, if any.
func (l *Log) Err() error {
	if !l.failed.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// WaitDurable waits until every record up to lsn is durable under the sync
// policy: fsynced under SyncAlways, written to the file (the page cache)
// under the others. It returns the log's write error if there was one,
// ErrClosed if the log closed without making it durable, or ctx's error.
// Close writes and fsyncs what was queued, so a record appended before
// Close is waited for, not failed.
func (l *Log) WaitDurable(ctx context.Context, lsn uint64) error {
	for {
		l.mu.Lock()
		err, ch, closed := l.mu.err, l.mu.progress, l.mu.closed
		ok := l.mu.durable >= lsn
		if l.opts.Sync != SyncAlways {
			ok = l.mu.written >= lsn
		}
		l.mu.Unlock()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case closed:
			select {
			case <-l.done: // the writer has ended: what it wrote is final
			case <-ctx.Done():
				return ctx.Err()
			}
			l.mu.Lock()
			err, ok = l.mu.err, l.mu.durable >= lsn || (l.opts.Sync != SyncAlways && l.mu.written >= lsn)
			l.mu.Unlock()
			switch {
			case ok:
				return nil
			case err != nil:
				return err
			}
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// loggedKeep is the most chunks logged since the last mark whose map Mark
// clears and keeps, rather than drops.
const loggedKeep = 1 << 14

// Mark is called at the instant a checkpoint snapshots the tables (under
// all their locks): it returns the LSN of the last record the snapshot
// holds the effect of. From then on chunks are logged again the first time
// an item needs them, and the writer starts a new segment at the next
// record, so that Cut(mark) can drop whole files.
func (l *Log) Mark() uint64 {
	l.mu.Lock()
	mark := l.mu.next - 1
	// clear keeps a map's memory, and takes time in proportion to it under
	// every table's lock: a map that grew large between checkpoints
	// (about 35 MiB a million chunks) is dropped for a new one instead.
	if len(l.mu.logged) > loggedKeep {
		l.mu.logged = make(map[uint64]uint64)
	} else {
		clear(l.mu.logged)
	}
	l.mu.rotateAt = mark
	l.mu.sinceMk = 0
	l.mu.fired = false
	l.mu.Unlock()
	l.poke()
	return mark
}

// Cut removes the segment files whose records are all at or before mark,
// once the checkpoint that Mark returned mark for is durable. The writer
// does it; Cut does not wait.
func (l *Log) Cut(mark uint64) {
	l.mu.Lock()
	l.mu.cutAt = max(l.mu.cutAt, mark)
	l.mu.Unlock()
	l.poke()
}

// Close writes and fsyncs what is queued, stops the writer and closes the
// file. Appends after Close are dropped. Idempotent.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		<-l.done
		return l.Err()
	}
	l.mu.closed = true
	started := l.mu.active
	l.mu.Unlock()
	if !started {
		close(l.done)
		return l.unlock()
	}
	l.poke()
	<-l.done
	return errors.Join(l.Err(), l.unlock())
}

func (l *Log) unlock() error {
	if l.lock == nil {
		return nil
	}
	err := l.lock.Close()
	l.lock = nil
	return err
}

func (l *Log) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// appendLocked queues e. l.mu is held.
func (l *Log) appendLocked(e entry) {
	l.mu.pending = append(l.mu.pending, e)
	l.mu.next++
}

func (l *Log) insert(tbl string, it *table.Item) {
	l.mu.Lock()
	if !l.mu.active {
		l.mu.Unlock()
		return
	}
	for _, c := range it.Chunks {
		// By ID, not key: a key used again once its chunk was
		// released names new data, which must be logged too.
		if l.mu.logged[c.Key()] == c.ID() {
			continue
		}
		l.mu.logged[c.Key()] = c.ID()
		c.Ref() // the item holds one, so the chunk is live
		l.appendLocked(entry{op: OpChunk, chunk: c})
	}
	l.appendLocked(entry{op: OpInsert, table: tbl, key: it.Key, priority: it.Priority,
		insertedAt: it.InsertedAt, traj: it.Trajectory})
	l.mu.Unlock()
	l.poke()
}

func (l *Log) add(e entry) {
	l.mu.Lock()
	if !l.mu.active {
		l.mu.Unlock()
		return
	}
	l.appendLocked(e)
	l.mu.Unlock()
	l.poke()
}

// Extension returns the table extension that logs the changes of the named
// table. It logs nothing before Start (so a replay is not logged again)
// and nothing for items restored from a checkpoint.
func (l *Log) Extension(tableName string) table.Extension {
	return &journal{l: l, table: tableName}
}

type journal struct {
	l     *Log
	table string
}

func (j *journal) OnInsert(it *table.Item) { j.l.insert(j.table, it) }
func (j *journal) OnSample(it *table.Item) {
	j.l.add(entry{op: OpSample, table: j.table, key: it.Key, timesSampled: it.TimesSampled})
}
func (j *journal) OnUpdate(it *table.Item, _ float64) {
	j.l.add(entry{op: OpUpdate, table: j.table, key: it.Key, priority: it.Priority})
}
func (j *journal) OnDelete(it *table.Item) { j.l.add(entry{op: OpDelete, table: j.table, key: it.Key}) }
func (j *journal) OnReset()                { j.l.add(entry{op: OpReset, table: j.table}) }
func (j *journal) OnRestore(*table.Item)   {}

// run is the writer goroutine.
func (l *Log) run() {
	defer close(l.done)
	stopSyncer := func() {}
	if l.opts.Sync == SyncInterval {
		stop, stopped := make(chan struct{}), make(chan struct{})
		go l.syncEvery(stop, stopped)
		stopSyncer = func() { close(stop); <-stopped }
	}
	for {
		<-l.wake
		l.mu.Lock()
		batch := l.mu.pending
		first := l.mu.next - uint64(len(batch))
		l.mu.pending = l.mu.spare[:0]
		rotateAt, cutAt, closing, failed := l.mu.rotateAt, l.mu.cutAt, l.mu.closed, l.mu.err != nil
		l.mu.Unlock()

		var err error
		var n int64
		if l.testHookWrite != nil {
			l.testHookWrite()
		}
		if !failed {
			n, err = l.writeBatch(batch, first, rotateAt)
		}
		for i := range batch {
			if c := batch[i].chunk; c != nil {
				c.Unref()
			}
			batch[i] = entry{}
		}
		last := first + uint64(len(batch)) - 1
		synced := false
		if err == nil && !failed && l.needSync(closing) {
			if err = l.seg.sync(); err == nil {
				synced = true
			}
		} else if err == nil && !failed && len(batch) > 0 && !l.seg.dirty {
			// The batch ended at a Mark: its records went to the
			// segment that the rotation closed, and closing fsynced it.
			// Without this, a batch that ends exactly at a Mark would
			// leave them written but never durable, holding back every
			// confirmation that waits for them until more is logged.
			synced = true
		}

		l.mu.Lock()
		l.mu.spare = batch[:0]
		if err != nil && l.mu.err == nil {
			l.mu.err = err
			l.failed.Store(true)
			l.log.Error("write-ahead log failed; changes are no longer logged", "dir", l.opts.Dir, "err", err)
		}
		if l.mu.err == nil {
			if len(batch) > 0 {
				l.mu.written = last
			}
			if synced {
				l.mu.durable = l.mu.written
			}
			if rotateAt != 0 && l.mu.rotateAt == rotateAt && l.seg.first > rotateAt {
				l.mu.rotateAt = 0
			}
		}
		close(l.mu.progress)
		l.mu.progress = make(chan struct{})
		l.mu.sinceMk += n
		fire := l.opts.OnSize != nil && l.opts.SizeTrigger > 0 && !l.mu.fired && l.mu.sinceMk >= l.opts.SizeTrigger
		if fire {
			l.mu.fired = true
		}
		more := len(l.mu.pending) > 0
		l.mu.Unlock()

		if fire {
			l.opts.OnSize()
		}
		if cutAt > l.cutDone && err == nil && !failed && l.cut(cutAt) {
			l.cutDone = cutAt // not listed again for every batch after it
		}
		if closing && !more {
			stopSyncer() // before the segment it syncs is closed
			if err := l.seg.close(); err != nil {
				l.mu.Lock()
				if l.mu.err == nil {
					l.mu.err = err
					l.failed.Store(true)
				}
				l.mu.Unlock()
			}
			return
		}
		if more || closing {
			l.poke()
		}
	}
}

// needSync reports whether the writer fsyncs the batch it wrote. Under
// SyncInterval the syncer does, apart from the last batch.
func (l *Log) needSync(closing bool) bool {
	return l.seg.dirty && (closing || l.opts.Sync == SyncAlways)
}

// syncEvery is SyncInterval's syncer: every Interval, if records were
// written since its last fsync, it fsyncs the current segment. It runs
// beside the writer, so that a slow fsync (one that waits behind a
// checkpoint's writes, say) holds back no write, and so no answer. The
// segments the writer closed meanwhile were fsynced by the close.
func (l *Log) syncEvery(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(l.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		target, durable, failed := l.mu.written, l.mu.durable, l.mu.err != nil
		l.mu.Unlock()
		if failed || target <= durable {
			continue
		}
		// Loaded after target: the records up to target are in this file
		// or in segments closed before it was started.
		f := l.cur.Load()
		if l.testHookSync != nil {
			l.testHookSync()
		}
		err := f.Sync()
		if errors.Is(err, os.ErrClosed) {
			continue // a rotation closed it: the next tick syncs the new one
		}
		l.mu.Lock()
		if err != nil {
			if l.mu.err == nil {
				l.mu.err = fmt.Errorf("wal: %w", err)
				l.failed.Store(true)
				l.log.Error("write-ahead log failed; changes are no longer logged", "dir", l.opts.Dir, "err", err)
			}
		} else {
			l.mu.durable = max(l.mu.durable, target)
		}
		close(l.mu.progress)
		l.mu.progress = make(chan struct{})
		l.mu.Unlock()
	}
}

// writeBatch encodes batch (whose first record is LSN first) and writes it,
// starting a new segment after rotateAt, and when the current one is full.
// It returns the bytes written.
func (l *Log) writeBatch(batch []entry, first, rotateAt uint64) (int64, error) {
	l.buf = l.buf[:0]
	var total int64
	flush := func() error {
		if len(l.buf) == 0 {
			return nil
		}
		err := l.seg.write(l.buf)
		total += int64(len(l.buf))
		l.buf = l.buf[:0]
		return err
	}
	rotate := func(next uint64) error {
		if err := flush(); err != nil {
			return err
		}
		if err := l.seg.close(); err != nil {
			return err
		}
		seg, err := createSegment(l.opts.Dir, next)
		if err != nil {
			return err
		}
		l.seg = seg
		l.cur.Store(seg.f)
		return nil
	}
	for i := range batch {
		lsn := first + uint64(i)
		if rotateAt != 0 && lsn == rotateAt+1 && l.seg.first <= rotateAt {
			if err := rotate(lsn); err != nil {
				return total, err
			}
		} else if l.seg.size+int64(len(l.buf)) >= l.opts.SegmentBytes && l.seg.size+int64(len(l.buf)) > int64(segmentHeaderSize) {
			if err := rotate(lsn); err != nil {
				return total, err
			}
		}
		var err error
		l.buf, err = appendRecord(l.buf, lsn, &batch[i])
		if err != nil {
			return total, fmt.Errorf("wal: encode record %d (%v): %w", lsn, batch[i].op, err)
		}
		if len(l.buf) >= 1<<20 {
			if err := flush(); err != nil {
				return total, err
			}
		}
	}
	if err := flush(); err != nil {
		return total, err
	}
	// Every record up to a Mark is queued before the Mark returns, so any
	// batch taken after it reaches it. With nothing after the Mark yet,
	// start the new segment now, so that Cut can drop the old ones.
	if rotateAt != 0 && l.seg.first <= rotateAt {
		if err := rotate(rotateAt + 1); err != nil {
			return total, err
		}
	}
	return total, nil
}

// cut removes the segments that hold only records at or before mark. It
// reports whether it got through; if not, the writer tries again after its
// next batch.
func (l *Log) cut(mark uint64) bool {
	segs, err := listSegments(l.opts.Dir)
	if err != nil {
		l.log.Warn("write-ahead log: cannot list segments to cut", "dir", l.opts.Dir, "err", err)
		return false
	}
	removed := 0
	for i, s := range segs {
		if i+1 >= len(segs) || s.first == l.seg.first || segs[i+1].first > mark+1 {
			break
		}
		if err := os.Remove(s.path); err != nil {
			l.log.Warn("write-ahead log: cannot remove segment", "file", s.path, "err", err)
			return false
		}
		removed++
	}
	if removed > 0 {
		if err := syncDir(l.opts.Dir); err != nil {
			l.log.Warn("write-ahead log: cannot sync directory", "dir", l.opts.Dir, "err", err)
		}
	}
	return true
}
