package wal

import (
	"bytes"
	"context"
	"errors"
	"math"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/leakcheck"
	"github.com/reverie-rl/reverie/internal/table"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func newItem(store *chunkstore.Store, key uint64) *table.Item {
	c := store.Insert(&reverbpb.ChunkData{ChunkKey: key, SequenceRange: &reverbpb.SequenceRange{EpisodeId: key}})
	return &table.Item{
		Key:        key,
		Priority:   float64(key),
		InsertedAt: int64(key) * 1000,
		Trajectory: table.EncodeTrajectory(&reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
			ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: key, Length: 1}},
		}}}),
		Chunks: []*chunkstore.Chunk{c},
	}
}

// write logs n inserts (each with its chunk) and a sample, update and
// delete of each, through the table extension: 5n records. Once the log is
// closed the store it returns must be empty: the log holds a chunk
// reference only until it wrote the chunk.
func write(t *testing.T, l *Log, from, n uint64) *chunkstore.Store {
	t.Helper()
	store := chunkstore.New()
	ext := l.Extension("t")
	for k := from; k < from+n; k++ {
		it := newItem(store, k)
		ext.OnInsert(it)
		it.TimesSampled = 1
		ext.OnSample(it)
		it.Priority = 0.5
		ext.OnUpdate(it, float64(k))
		ext.OnDelete(it)
		it.Chunks[0].Unref()
	}
	return store
}

func closeEmpty(t *testing.T, l *Log, stores ...*chunkstore.Store) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		if s.Len() != 0 {
			t.Fatalf("the log kept %d chunk references after writing them", s.Len())
		}
	}
}

func openLog(t *testing.T, dir string, sync Sync, last uint64) *Log {
	t.Helper()
	l, err := New(Options{Dir: dir, Sync: sync, SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(last); err != nil {
		t.Fatal(err)
	}
	return l
}

func replayAll(t *testing.T, dir string, after uint64) ([]Record, ReplayReport) {
	t.Helper()
	var recs []Record
	rep, err := Replay(dir, after, func(r *Record) error { recs = append(recs, *r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return recs, rep
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, SyncAlways, 0)
	store := write(t, l, 1, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.WaitDurable(ctx, l.Last()); err != nil {
		t.Fatal(err)
	}
	closeEmpty(t, l, store)
	if err := l.WaitDurable(ctx, l.Last()+1); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitDurable after Close: %v", err)
	}
	recs, rep := replayAll(t, dir, 0)
	if len(recs) != 500 || rep.Last != 500 || rep.Segments < 2 {
		t.Fatalf("%d records, last %d, %d segments; want 500, 500, several (4 KiB segments)", len(recs), rep.Last, rep.Segments)
	}
	want := []Op{OpChunk, OpInsert, OpSample, OpUpdate, OpDelete}
	for i, r := range recs {
		k := uint64(1 + i/5)
		if r.LSN != uint64(i+1) || r.Op != want[i%5] {
			t.Fatalf("record %d: lsn %d op %v", i, r.LSN, r.Op)
		}
		switch r.Op {
		case OpChunk:
			if m, err := chunkstore.ParseMeta(r.ChunkBytes); err != nil || m.Key != k {
				t.Fatalf("record %d: chunk %d (%v), want %d", i, m.Key, err, k)
			}
		case OpInsert:
			if r.Table != "t" || r.Key != k || r.Priority != float64(k) || r.InsertedAt != int64(k)*1000 ||
				!bytes.Equal(r.TrajectoryBytes, table.EncodeTrajectory(&reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
					ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: k, Length: 1}},
				}}})) {
				t.Fatalf("record %d: %+v", i, r)
			}
		case OpSample:
			if r.Key != k || r.TimesSampled != 1 {
				t.Fatalf("record %d: %+v", i, r)
			}
		case OpUpdate:
			if r.Key != k || r.Priority != 0.5 {
				t.Fatalf("record %d: %+v", i, r)
			}
		}
	}
	// Replay after a position skips what is before it.
	if recs, _ := replayAll(t, dir, 250); len(recs) != 250 || recs[0].LSN != 251 {
		t.Fatalf("after 250: %d records from %d", len(recs), recs[0].LSN)
	}
}

// TestMarkAndCut checks that a Mark starts a new segment and that Cut
// removes exactly the segments before it, and that chunks are logged again
// after a Mark.
func TestMarkAndCut(t *testing.T) {
	dir := t.TempDir()
	l, err := New(Options{Dir: dir, Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(0); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	store := chunkstore.New()
	ext := l.Extension("t")
	it := newItem(store, 7)
	ext.OnInsert(it)
	ext.OnInsert(it) // the chunk is logged once
	mark := l.Mark()
	if mark != 3 {
		t.Fatalf("mark %d, want 3", mark)
	}
	ext.OnInsert(it) // logged again after the Mark
	ctx := context.Background()
	if err := l.WaitDurable(ctx, l.Last()); err != nil {
		t.Fatal(err)
	}
	l.Cut(mark)
	// The cut is the writer's; wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		segs, err := listSegments(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) == 1 && segs[0].first == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segments after Cut(%d): %+v", mark, segs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	it.Chunks[0].Unref()
	recs, _ := replayAll(t, dir, mark)
	if len(recs) != 2 || recs[0].Op != OpChunk || recs[1].Op != OpInsert {
		t.Fatalf("after the mark: %+v", recs)
	}
}

// TestBatchEndingAtMarkIsDurable: under SyncAlways, a batch whose last
// record is the one a Mark returned goes to the segment the rotation after
// it closes (and fsyncs), leaving a new, clean segment: WaitDurable must
// not wait for a later record to sync that one.
func TestBatchEndingAtMarkIsDurable(t *testing.T) {
	l, err := New(Options{Dir: t.TempDir(), Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	entered, gate := make(chan struct{}), make(chan struct{})
	first := true
	l.testHookWrite = func() { // the writer's goroutine only
		if first {
			first = false
			entered <- struct{}{}
			<-gate
		}
	}
	if err := l.Start(0); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	store := chunkstore.New()
	ext := l.Extension("t")
	it := newItem(store, 1)
	ext.OnInsert(it) // records 1 and 2: the writer takes them and waits
	<-entered
	ext.OnUpdate(it, 0) // record 3, queued
	if mark := l.Mark(); mark != 3 {
		t.Fatalf("mark %d, want 3", mark)
	}
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.WaitDurable(ctx, 3); err != nil {
		t.Fatalf("record 3, the last before the mark: %v", err)
	}
	it.Chunks[0].Unref()
}

// TestTornTail cuts the last segment at every byte of its last records and
// checks that Replay returns the whole records before the cut, truncates
// the rest, and that the log can go on after it.
func TestTornTail(t *testing.T) {
	src := t.TempDir()
	l := openLog(t, src, SyncNever, 0)
	closeEmpty(t, l, write(t, l, 1, 3))
	segs, _ := listSegments(src)
	full, err := os.ReadFile(segs[0].path)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := replayAll(t, src, 0)
	for cut := len(full) - 1; cut >= int(all[len(all)-3].Offset); cut-- {
		dir := t.TempDir()
		path := filepath.Join(dir, filepath.Base(segs[0].path))
		if err := os.WriteFile(path, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		recs, rep := replayAll(t, dir, 0)
		// The records that end at or before the cut survive whole.
		whole, end := 0, int64(segmentHeaderSize)
		for i := range all {
			next := int64(len(full))
			if i+1 < len(all) {
				next = all[i+1].Offset
			}
			if next <= int64(cut) {
				whole, end = i+1, next
			}
		}
		if len(recs) != whole || rep.TornBytes != int64(cut)-end {
			t.Fatalf("cut at %d: %d records, %d torn bytes; want %d, %d", cut, len(recs), rep.TornBytes, whole, int64(cut)-end)
		}
		if st, _ := os.Stat(path); st.Size() != end {
			t.Fatalf("cut at %d: file is %d bytes, want %d", cut, st.Size(), end)
		}
		// The log goes on after a torn tail.
		l := openLog(t, dir, SyncAlways, rep.Last)
		closeEmpty(t, l, write(t, l, 100, 1))
		if recs2, _ := replayAll(t, dir, 0); len(recs2) != len(recs)+5 {
			t.Fatalf("cut at %d: %d records after going on, want %d", cut, len(recs2), len(recs)+5)
		}
	}
}

// TestZeroFilledTail: a crash can leave the last segment longer than what
// reached the disk, the rest reading as zeros. Replay keeps the records
// before them and cuts the zeros off as a torn tail; zeros in a segment
// that is not the last are still corruption.
func TestZeroFilledTail(t *testing.T) {
	for _, zeros := range []int{1, frameHeaderSize, 16, 4096} {
		dir := t.TempDir()
		l := openLog(t, dir, SyncNever, 0)
		closeEmpty(t, l, write(t, l, 1, 3))
		segs, _ := listSegments(dir)
		last := segs[len(segs)-1].path
		before, _ := os.Stat(last)
		f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, zeros)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		recs, rep := replayAll(t, dir, 0)
		if len(recs) != 15 || rep.TornBytes != int64(zeros) {
			t.Fatalf("%d zero bytes: %d records, %d torn bytes; want 15, %d", zeros, len(recs), rep.TornBytes, zeros)
		}
		if st, _ := os.Stat(last); st.Size() != before.Size() {
			t.Fatalf("%d zero bytes: file is %d bytes after Replay, want %d", zeros, st.Size(), before.Size())
		}
	}
	// Not the last segment: corruption.
	dir := t.TempDir()
	l := openLog(t, dir, SyncNever, 0)
	closeEmpty(t, l, write(t, l, 1, 200))
	segs, _ := listSegments(dir)
	f, err := os.OpenFile(segs[0].path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 16))
	f.Close()
	if _, err := Replay(dir, 0, func(*Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("zeros at the end of the first of %d segments: %v, want ErrCorrupt", len(segs), err)
	}
}

// TestStartMakesMissingDirs: Start creates the log's directory and its
// missing parents.
func TestStartMakesMissingDirs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "wal")
	l := openLog(t, dir, SyncAlways, 0)
	closeEmpty(t, l, write(t, l, 1, 1))
	if recs, _ := replayAll(t, dir, 0); len(recs) != 5 {
		t.Fatalf("%d records, want 5", len(recs))
	}
}

// TestCorruptMiddle flips a byte in a record that is not the last and
// checks that Replay refuses, naming the file and offset.
func TestCorruptMiddle(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, SyncNever, 0)
	closeEmpty(t, l, write(t, l, 1, 200))
	segs, _ := listSegments(dir)
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	for _, i := range []int{0, len(segs) - 1} {
		data, _ := os.ReadFile(segs[i].path)
		data[segmentHeaderSize+frameHeaderSize+2] ^= 1
		if err := os.WriteFile(segs[i].path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Replay(dir, 0, func(*Record) error { return nil })
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Path != segs[i].path || ce.Offset != int64(segmentHeaderSize) {
			t.Fatalf("segment %d: got %v", i, err)
		}
		data[segmentHeaderSize+frameHeaderSize+2] ^= 1
		if err := os.WriteFile(segs[i].path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A missing middle segment is a gap.
	if err := os.Remove(segs[1].path); err != nil {
		t.Fatal(err)
	}
	if _, err := Replay(dir, 0, func(*Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("gap: got %v", err)
	}
}

// TestWriteFailure makes the segment file fail under the writer and checks
// that the log stops: WaitDurable reports the error for the record that was
// not written and for every later one, and Close returns it.
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, SyncAlways, 0)
	store := write(t, l, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.WaitDurable(ctx, l.Last()); err != nil {
		t.Fatal(err)
	}
	// The disk "fails": every write and fsync from now on errors.
	l.seg.f.Close()
	write(t, l, 10, 1)
	err := l.WaitDurable(ctx, l.Last())
	if err == nil || !strings.Contains(err.Error(), "wal: write "+l.seg.path) {
		t.Fatalf("WaitDurable after a failed write: %v", err)
	}
	if l.Err() == nil {
		t.Fatal("Err is nil after a failed write")
	}
	write(t, l, 20, 1)
	if err := l.WaitDurable(ctx, l.Last()); err == nil {
		t.Fatal("WaitDurable succeeded after the log failed")
	}
	if err := l.Close(); err == nil {
		t.Fatal("Close returned nil after the log failed")
	}
	// The records written before the failure are intact; the chunks the
	// log held are released.
	if store.Len() != 0 {
		t.Fatalf("the log kept %d chunk references", store.Len())
	}
	recs, _ := replayAll(t, dir, 0)
	if len(recs) != 10 {
		t.Fatalf("%d records survive, want the 10 written before the failure", len(recs))
	}
}

// TestAnsweredOnceWritten: under SyncNever and SyncInterval WaitDurable
// returns only once the records are written to the file, so that a crash
// of the process (which keeps what reached the page cache) loses nothing
// answered. A writer held back holds the answers back with it.
func TestAnsweredOnceWritten(t *testing.T) {
	for _, policy := range []Sync{SyncNever, SyncInterval} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			l, err := New(Options{Dir: dir, Sync: policy, Interval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			gate := make(chan struct{})
			l.testHookWrite = func() { <-gate } // a disk that does not keep up
			if err := l.Start(0); err != nil {
				t.Fatal(err)
			}
			store := write(t, l, 1, 1)
			short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := l.WaitDurable(short, l.Last()); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("with the writer stalled: %v, want the deadline", err)
			}
			waited := make(chan error, 1)
			go func() { waited <- l.WaitDurable(context.Background(), l.Last()) }()
			select {
			case err := <-waited:
				t.Fatalf("WaitDurable returned %v before the writer moved", err)
			case <-time.After(50 * time.Millisecond):
			}
			close(gate)
			if err := <-waited; err != nil {
				t.Fatalf("after the writer wrote: %v", err)
			}
			// Answered means in the file, without a Close: what a
			// SIGKILL leaves.
			if recs, _ := replayAll(t, dir, 0); len(recs) != 5 {
				t.Fatalf("%d records in the file once answered, want 5", len(recs))
			}
			closeEmpty(t, l, store)
		})
	}
}

// TestIntervalSyncDoesNotHoldWrites: under SyncInterval the fsyncs run
// beside the writer, so a stalled fsync holds back no answer, and each
// interval's fsync covers what was written before it.
func TestIntervalSyncDoesNotHoldWrites(t *testing.T) {
	l, err := New(Options{Dir: t.TempDir(), Sync: SyncInterval, Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	l.testHookSync = func() { // the syncer's goroutine only
		select {
		case entered <- struct{}{}:
			<-gate
		default:
		}
	}
	if err := l.Start(0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := write(t, l, 1, 1)
	if err := l.WaitDurable(ctx, l.Last()); err != nil {
		t.Fatal(err)
	}
	<-entered // the syncer is in an fsync that does not end
	store2 := write(t, l, 2, 1)
	if err := l.WaitDurable(ctx, l.Last()); err != nil {
		t.Fatalf("a write while the fsync is stalled: %v", err)
	}
	l.mu.Lock()
	durable := l.mu.durable
	l.mu.Unlock()
	if durable != 0 {
		t.Fatalf("durable %d while the only fsync is stalled, want 0", durable)
	}
	close(gate)
	for last := l.Last(); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		durable = l.mu.durable
		l.mu.Unlock()
		if durable == last {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("durable %d, last %d: the syncer did not catch up", durable, last)
		}
	}
	closeEmpty(t, l, store, store2)
}

// TestWaitDuringClose: a record appended before Close is written and
// fsynced by it, so a WaitDurable that starts while Close drains the log
// waits for it and succeeds, instead of failing with ErrClosed for a
// change that is kept.
func TestWaitDuringClose(t *testing.T) {
	for _, policy := range []Sync{SyncAlways, SyncInterval, SyncNever} {
		t.Run(policy.String(), func(t *testing.T) {
			l, err := New(Options{Dir: t.TempDir(), Sync: policy})
			if err != nil {
				t.Fatal(err)
			}
			gate := make(chan struct{})
			l.testHookWrite = func() { <-gate }
			if err := l.Start(0); err != nil {
				t.Fatal(err)
			}
			store := write(t, l, 1, 1)
			closed := make(chan error, 1)
			go func() { closed <- l.Close() }()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				l.mu.Lock()
				c := l.mu.closed
				l.mu.Unlock()
				if c {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("Close did not start")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			waited := make(chan error, 1)
			go func() { waited <- l.WaitDurable(ctx, l.Last()) }()
			close(gate)
			if err := <-waited; err != nil {
				t.Fatalf("WaitDurable during Close: %v", err)
			}
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if store.Len() != 0 {
				t.Fatalf("the log kept %d chunk references", store.Len())
			}
		})
	}
}

// TestEveryAcceptedMessageFits: the log takes a record for any chunk or
// item the server accepts, whose gRPC message may be up to 2^31-1 bytes;
// a record over the limit would stop the log for every client. (A chunk
// of 1 GiB + 27 bytes stopped it when the limit was 1 GiB; checked by
// hand, since a test that logs one needs gigabytes.)
func TestEveryAcceptedMessageFits(t *testing.T) {
	const recordOverhead = 1 << 10 // LSN, op, table name, key: far less
	if maxPayload < math.MaxInt32+recordOverhead {
		t.Fatalf("maxPayload %d is under the largest message the server takes (%d) and a record's overhead", maxPayload, math.MaxInt32)
	}
	if maxPayload >= 1<<32 {
		t.Fatalf("maxPayload %d does not fit a record's 32-bit length", maxPayload)
	}
}

// writeBig logs n inserts of items whose chunks hold 1,500 random bytes, so
// that each chunk record spans a whole 512-byte sector.
func writeBig(t *testing.T, l *Log, from, n uint64) *chunkstore.Store {
	t.Helper()
	store := chunkstore.New()
	ext := l.Extension("t")
	rng := mathrand.New(mathrand.NewPCG(from, n))
	for k := from; k < from+n; k++ {
		payload := make([]byte, 1500)
		for i := range payload {
			payload[i] = byte(rng.IntN(255) + 1) // no zero byte
		}
		c := store.Insert(&reverbpb.ChunkData{
			ChunkKey: k, SequenceRange: &reverbpb.SequenceRange{EpisodeId: k},
			Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{TensorContent: payload}}},
		})
		it := &table.Item{
			Key: k, Priority: 1,
			Trajectory: table.EncodeTrajectory(&reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
				ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: k, Length: 1}},
			}}}),
			Chunks: []*chunkstore.Chunk{c},
		}
		ext.OnInsert(it)
		c.Unref()
	}
	return store
}

// TestTornWriteInLastSegment: a crash during a write can leave, in the
// last segment, a damaged record followed by zeros, a sector of zeros
// inside a record with later records intact (writeback need not keep
// order), or a zeroed record header. Replay reads each as a torn tail and
// keeps the records before it; a flipped byte with records after it is
// still corruption, and so is a zeroed sector in a segment but the last.
func TestTornWriteInLastSegment(t *testing.T) {
	src := t.TempDir()
	l, err := New(Options{Dir: src, Sync: SyncNever, SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(0); err != nil {
		t.Fatal(err)
	}
	closeEmpty(t, l, writeBig(t, l, 1, 10))
	segs, _ := listSegments(src)
	full, _ := os.ReadFile(segs[0].path)
	all, _ := replayAll(t, src, 0)
	// The record the damage lands in: a chunk record in the middle.
	k := 0
	for i, r := range all {
		if r.Op == OpChunk && i >= len(all)/2 {
			k = i
			break
		}
	}
	at := int(all[k].Offset)
	end := int(all[k+1].Offset)
	sector := (at + frameHeaderSize + sectorSize - 1) / sectorSize * sectorSize
	if sector+sectorSize > end {
		t.Fatalf("record %d at %d..%d holds no whole sector", k, at, end)
	}
	cases := []struct {
		name   string
		damage func(b []byte)
		torn   bool
	}{
		{"zeros from inside a record to the end", func(b []byte) { clear(b[at+frameHeaderSize+3:]) }, true},
		{"a zeroed sector, records after it", func(b []byte) { clear(b[sector : sector+sectorSize]) }, true},
		{"a zeroed header, records after it", func(b []byte) { clear(b[at : at+frameHeaderSize]) }, true},
		{"a flipped byte, records after it", func(b []byte) { b[sector+7] ^= 1 }, false},
		{"a zeroed half sector, records after it", func(b []byte) { clear(b[sector : sector+sectorSize/2]) }, false},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, filepath.Base(segs[0].path))
			data := bytes.Clone(full)
			tt.damage(data)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			var recs []Record
			rep, err := Replay(dir, 0, func(r *Record) error { recs = append(recs, *r); return nil })
			if !tt.torn {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Offset != int64(at) {
					t.Fatalf("Replay = %v; want corruption at byte offset %d", err, at)
				}
				return
			}
			if err != nil || len(recs) != k || rep.TornBytes != int64(len(data)-at) {
				t.Fatalf("Replay = %d records, %d torn bytes, %v; want %d, %d", len(recs), rep.TornBytes, err, k, len(data)-at)
			}
			if st, _ := os.Stat(path); st.Size() != int64(at) {
				t.Fatalf("file is %d bytes after Replay, want %d", st.Size(), at)
			}
		})
	}

	// In a segment that is not the last, a zeroed sector is corruption.
	dir := t.TempDir()
	l = openLog(t, dir, SyncNever, 0)
	closeEmpty(t, l, writeBig(t, l, 1, 20))
	segs, _ = listSegments(dir)
	if len(segs) < 2 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	data, _ := os.ReadFile(segs[0].path)
	clear(data[sectorSize : 2*sectorSize])
	if err := os.WriteFile(segs[0].path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Replay(dir, 0, func(*Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a zeroed sector in the first of %d segments: %v, want ErrCorrupt", len(segs), err)
	}
}

// TestMarkDropsALargeLoggedMap: the map of chunks logged since the last
// mark gives its memory back at the next mark when it grew large.
func TestMarkDropsALargeLoggedMap(t *testing.T) {
	l, err := New(Options{Dir: t.TempDir(), Sync: SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(0); err != nil {
		t.Fatal(err)
	}
	store := chunkstore.New()
	ext := l.Extension("t")
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const n = 300_000
	for k := uint64(1); k <= n; k++ {
		it := newItem(store, k)
		ext.OnInsert(it)
		ext.OnDelete(it)
		it.Chunks[0].Unref()
	}
	closeEmpty(t, l, store)
	during := heap()
	l.Mark()
	after := heap()
	runtime.KeepAlive(l) // else the collector takes the whole log
	// 300,000 entries take about 10 MiB.
	if during < after+6<<20 {
		t.Fatalf("heap %d MiB before the mark, %d MiB after: the map kept its memory", during>>20, after>>20)
	}
}
