package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/selector"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc"
)

// wtStart serves tables on a loopback port and returns the server and a
// client connected to it; both are closed when the test ends.
func wtStart(t *testing.T, tables ...server.TableConfig) (*servertest.Server, *client.Client) {
	t.Helper()
	s := servertest.Start(t, server.Config{Tables: tables})
	return s, wtDial(t, s.Addr)
}

func wtDial(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wtWriter returns a writer that is closed when the test ends (before the
// client and the server).
func wtWriter(t *testing.T, c *client.Client, opts client.WriterOptions) *client.TrajectoryWriter {
	t.Helper()
	w, err := c.NewTrajectoryWriter(context.Background(), opts)
	if err != nil {
		t.Fatalf("NewTrajectoryWriter: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func wtCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wtSample is one sample read with a raw SampleStream: the item, its
// chunks by key, and its decoded columns.
type wtSample struct {
	item   *reverbpb.PrioritizedItem
	chunks map[uint64]*reverbpb.ChunkData
	cols   []client.Tensor
}

// wtSampleN reads n samples from table with one SampleStream request.
func wtSampleN(t *testing.T, rpc reverbpb.ReverbServiceClient, table string, n int) []wtSample {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rpc.SampleStream(ctx)
	if err != nil {
		t.Fatalf("SampleStream: %v", err)
	}
	err = st.Send(&reverbpb.SampleStreamRequest{Table: table, NumSamples: int64(n), RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: 5000}})
	if err != nil {
		t.Fatalf("SampleStream send: %v", err)
	}
	var out []wtSample
	var cur *wtSample
	for len(out) < n {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("SampleStream recv after %d samples: %v", len(out), err)
		}
		for _, e := range resp.GetEntries() {
			if e.GetInfo() != nil {
				cur = &wtSample{item: e.GetInfo().GetItem(), chunks: make(map[uint64]*reverbpb.ChunkData)}
			}
			if cur == nil {
				t.Fatal("sample entry without info")
			}
			for _, c := range e.GetData() {
				cur.chunks[c.GetChunkKey()] = c
			}
			if e.GetEndOfSequence() {
				cur.cols = wtDecode(t, cur)
				out = append(out, *cur)
				cur = nil
			}
		}
	}
	return out
}

// wtDecode assembles a sample's columns from its chunks (Reverb's chunk layout).
func wtDecode(t *testing.T, s *wtSample) []client.Tensor {
	t.Helper()
	decoded := make(map[uint64][]client.Tensor)
	for k, c := range s.chunks {
		ts, err := client.DecodeChunk(c)
		if err != nil {
			t.Fatalf("DecodeChunk: %v", err)
		}
		decoded[k] = ts
	}
	var cols []client.Tensor
	for i, col := range s.item.GetFlatTrajectory().GetColumns() {
		var parts []client.Tensor
		for _, sl := range col.GetChunkSlices() {
			ts, ok := decoded[sl.GetChunkKey()]
			if !ok || int(sl.GetIndex()) >= len(ts) {
				t.Fatalf("column %d: slice %v has no chunk tensor", i, sl)
			}
			part, err := client.Slice(ts[sl.GetIndex()], int64(sl.GetOffset()), int64(sl.GetOffset()+sl.GetLength()))
			if err != nil {
				t.Fatalf("column %d: %v", i, err)
			}
			parts = append(parts, part)
		}
		joined, err := client.Concat(parts)
		if err != nil {
			t.Fatalf("column %d: %v", i, err)
		}
		if col.GetSqueeze() {
			if joined, err = client.Squeeze0(joined); err != nil {
				t.Fatalf("column %d: %v", i, err)
			}
		}
		cols = append(cols, joined)
	}
	return cols
}

// wtStack stacks the given steps of a column, or squeezes a single one.
func wtStack(t *testing.T, steps []client.Tensor) client.Tensor {
	t.Helper()
	s, err := client.Stack(steps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wtObs(i int) client.Tensor { return client.Vector([]float32{float32(i), -float32(i), 0.5}) }
func wtAct(i int) client.Tensor { return client.Scalar(int64(10 * i)) }
func wtName(i int) client.Tensor {
	s, err := client.FromStrings([]string{fmt.Sprintf("step-%d", i)})
	if err != nil {
		panic(err)
	}
	return s
}

func wtStep(i int) map[string]client.Tensor {
	return map[string]client.Tensor{"obs": wtObs(i), "act": wtAct(i), "name": wtName(i)}
}

// wtRange returns f(from), ..., f(to-1).
func wtRange(from, to int, f func(int) client.Tensor) []client.Tensor {
	var out []client.Tensor
	for i := from; i < to; i++ {
		out = append(out, f(i))
	}
	return out
}

func wtCheckColumn(t *testing.T, what string, got, want client.Tensor) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s: got %v%v %v, want %v%v %v", what, got.DType, got.Shape, got, want.DType, want.Shape, want)
	}
}

// TestWriterOverlappingItems writes three columns with items of the last
// three steps after every step, over chunks of two rows, and checks what
// a sampler reads back.
func TestWriterOverlappingItems(t *testing.T) {
	s, c := wtStart(t, server.QueueTable("q", 100))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 5, ChunkLength: 2})
	const steps, length = 12, 3
	for i := range steps {
		if err := w.Append(ctx, wtStep(i)); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		if i+1 < length {
			continue
		}
		err := w.CreateItem(ctx, "q", float64(i), []client.TrajectoryColumn{
			w.History("obs").Last(length),
			w.History("act").Last(length),
			w.History("name").Last(length),
			w.History("act").At(-1).Squeeze(),
		})
		if err != nil {
			t.Fatalf("CreateItem %d: %v", i, err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	samples := wtSampleN(t, s.Client, "q", steps-length+1)
	var episode uint64
	for k, smp := range samples {
		last := k + length - 1 // FIFO: the k-th item ends at step k+2
		if got := smp.item.GetPriority(); got != float64(last) {
			t.Errorf("sample %d: priority %v, want %v", k, got, last)
		}
		wtCheckColumn(t, fmt.Sprintf("sample %d obs", k), smp.cols[0], wtStack(t, wtRange(last-2, last+1, wtObs)))
		wtCheckColumn(t, fmt.Sprintf("sample %d act", k), smp.cols[1], wtStack(t, wtRange(last-2, last+1, wtAct)))
		wtCheckColumn(t, fmt.Sprintf("sample %d name", k), smp.cols[2], wtStack(t, wtRange(last-2, last+1, wtName)))
		wtCheckColumn(t, fmt.Sprintf("sample %d squeezed act", k), smp.cols[3], wtAct(last))

		for j, col := range smp.item.GetFlatTrajectory().GetColumns()[:3] {
			// Three consecutive steps over chunks of two rows: two slices.
			if n := len(col.GetChunkSlices()); n != 2 {
				t.Errorf("sample %d column %d: %d chunk slices, want 2 (merged runs)", k, j, n)
			}
		}
		for key, ch := range smp.chunks {
			sr := ch.GetSequenceRange()
			if episode == 0 {
				episode = sr.GetEpisodeId()
			}
			if sr.GetEpisodeId() != episode || sr.GetSparse() || sr.GetEnd()-sr.GetStart() != 1 || sr.GetStart()%2 != 0 {
				t.Errorf("chunk %d: sequence range %v, want two rows of episode %d starting at an even step", key, sr, episode)
			}
			if ch.GetDataTensorsLen() != 1 || ch.GetDeltaEncoded() {
				t.Errorf("chunk %d: %d tensors, delta %v", key, ch.GetDataTensorsLen(), ch.GetDeltaEncoded())
			}
		}
		for _, col := range smp.item.GetFlatTrajectory().GetColumns() {
			for _, sl := range col.GetChunkSlices() {
				if sl.GetIndex() != 0 {
					t.Errorf("chunk slice index %d, want 0", sl.GetIndex())
				}
			}
		}
	}
}

// TestWriterAutoChunkLength checks that automatic chunk lengths start at
// one row and grow to the item length.
func TestWriterAutoChunkLength(t *testing.T) {
	s, c := wtStart(t, server.QueueTable("q", 100))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 8})
	const steps, length = 30, 4
	for i := range steps {
		if err := w.Append(ctx, map[string]client.Tensor{"obs": wtObs(i)}); err != nil {
			t.Fatal(err)
		}
		if i+1 >= length {
			if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("obs").Last(length)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	samples := wtSampleN(t, s.Client, "q", steps-length+1)
	rows := make(map[int32]int32) // chunk start step -> rows
	for k, smp := range samples {
		wtCheckColumn(t, fmt.Sprintf("sample %d", k), smp.cols[0], wtStack(t, wtRange(k, k+length, wtObs)))
		for _, ch := range smp.chunks {
			sr := ch.GetSequenceRange()
			rows[sr.GetStart()] = sr.GetEnd() - sr.GetStart() + 1
		}
	}
	if rows[0] != 1 {
		t.Errorf("first chunk has %d rows, want 1 (nothing to tune on yet)", rows[0])
	}
	var longest int32
	for _, n := range rows {
		longest = max(longest, n)
	}
	if longest != length {
		t.Errorf("longest chunk has %d rows, want the item length %d; chunks by start step: %v", longest, length, rows)
	}
}

// TestWriterSqueezeAndPartialSteps covers squeezed columns, steps that
// omit columns, and invalid references.
func TestWriterSqueezeAndPartialSteps(t *testing.T) {
	s, c := wtStart(t, server.QueueTable("q", 100))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 3, ChunkLength: 1, DeltaEncode: true})
	counter := func(i int) client.Tensor { return client.Vector([]int32{int32(i), int32(1000 + i)}) }

	// Step 0 has only "obs"; steps 1 and 2 have both.
	if err := w.Append(ctx, map[string]client.Tensor{"obs": counter(0)}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		if err := w.Append(ctx, map[string]client.Tensor{"obs": counter(i), "act": wtAct(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.History("act").Len(); got != 3 {
		t.Errorf("History(act).Len() = %d, want 3 (aligned with obs)", got)
	}
	invalid := map[string][]client.TrajectoryColumn{
		"gap":           {w.History("act").Last(3)},
		"unknown":       {w.History("nope").Last(1)},
		"too long":      {w.History("obs").Last(4)},
		"index":         {w.History("obs").At(3)},
		"neg index":     {w.History("obs").At(-4)},
		"empty slice":   {w.History("obs").Slice(1, 1)},
		"squeeze two":   {w.History("obs").Last(2).Squeeze()},
		"no columns":    {},
		"zero value":    {{}},
		"last zero":     {w.History("obs").Last(0)},
		"slice reverse": {w.History("obs").Slice(-1, 1)},
	}
	for name, traj := range invalid {
		if err := w.CreateItem(ctx, "q", 1, traj); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: CreateItem = %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := w.History("act").Last(3).Err(); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("TrajectoryColumn.Err() = %v, want ErrInvalidArgument", err)
	}
	if err := w.Append(ctx, map[string]client.Tensor{"obs": wtObs(3)}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Append with another dtype = %v, want ErrInvalidArgument", err)
	}
	if err := w.Append(ctx, map[string]client.Tensor{"obs": counter(3), "act": wtObs(3)}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Append with another shape = %v, want ErrInvalidArgument", err)
	}
	if err := w.Append(ctx, nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Append(nil) = %v, want ErrInvalidArgument", err)
	}
	if got := w.EpisodeSteps(); got != 3 {
		t.Errorf("EpisodeSteps() = %d after failed appends, want 3", got)
	}

	err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{
		w.History("obs").Slice(0, -1),
		w.History("act").At(-1).Squeeze(),
		w.History("obs").At(0).Squeeze(),
		w.History("act").Slice(-2, 3),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Steps leave the history after NumKeepAliveRefs more appends.
	old := w.History("obs").At(0)
	for i := 3; i < 6; i++ {
		if err := w.Append(ctx, map[string]client.Tensor{"obs": counter(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{old}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("CreateItem with an expired step = %v, want ErrInvalidArgument", err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	smp := wtSampleN(t, s.Client, "q", 1)[0]
	wtCheckColumn(t, "obs[0:-1]", smp.cols[0], wtStack(t, wtRange(0, 2, counter)))
	wtCheckColumn(t, "act[-1] squeezed", smp.cols[1], wtAct(2))
	wtCheckColumn(t, "obs[0] squeezed", smp.cols[2], counter(0))
	wtCheckColumn(t, "act[-2:3]", smp.cols[3], wtStack(t, wtRange(1, 3, wtAct)))
	for key, ch := range smp.chunks {
		if !ch.GetDeltaEncoded() {
			t.Errorf("chunk %d is not delta encoded", key)
		}
	}
}

// TestWriterFlushTimeout fills a queue so that the second item cannot be
// inserted: Flush times out until a sample makes room.
func TestWriterFlushTimeout(t *testing.T) {
	s, c := wtStart(t, server.QueueTable("q", 1))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 2})
	for i := range 2 {
		if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(i)}); err != nil {
			t.Fatal(err)
		}
		if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(1)}); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := w.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush against a full queue = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Flush returned after %v", d)
	}
	first := wtSampleN(t, s.Client, "q", 1)[0]
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after a sample: %v", err)
	}
	second := wtSampleN(t, s.Client, "q", 1)[0]
	wtCheckColumn(t, "first", first.cols[0], wtStack(t, []client.Tensor{wtAct(0)}))
	wtCheckColumn(t, "second", second.cols[0], wtStack(t, []client.Tensor{wtAct(1)}))
}

// TestWriterEndEpisode checks episode ids and steps in chunk sequence
// ranges, and what clearBuffers drops.
func TestWriterEndEpisode(t *testing.T) {
	s, c := wtStart(t, server.QueueTable("q", 100))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 4, ChunkLength: 4})
	for i := range 2 {
		if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(2)}); err != nil {
		t.Fatal(err)
	}
	if err := w.EndEpisode(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := w.EpisodeSteps(); got != 0 {
		t.Errorf("EpisodeSteps() after EndEpisode = %d", got)
	}
	for i := 2; i < 4; i++ {
		if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Without clearBuffers, items can span the two episodes.
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(4)}); err != nil {
		t.Fatal(err)
	}
	stale := w.History("act").Last(1)
	if err := w.EndEpisode(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := w.History("act").Len(); got != 0 {
		t.Errorf("History after clearBuffers has %d steps", got)
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{stale}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("CreateItem with a cleared step = %v, want ErrInvalidArgument", err)
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(1)}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("CreateItem after clearBuffers = %v, want ErrInvalidArgument", err)
	}
	if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(4)}); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(1)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	samples := wtSampleN(t, s.Client, "q", 3)
	type rng struct {
		episode    uint64
		start, end int32
	}
	ranges := func(smp wtSample) []rng {
		var out []rng
		for _, sl := range smp.item.GetFlatTrajectory().GetColumns()[0].GetChunkSlices() {
			sr := smp.chunks[sl.GetChunkKey()].GetSequenceRange()
			out = append(out, rng{sr.GetEpisodeId(), sr.GetStart(), sr.GetEnd()})
		}
		return out
	}
	r0, r1, r2 := ranges(samples[0]), ranges(samples[1]), ranges(samples[2])
	if len(r0) != 1 || r0[0].start != 0 || r0[0].end != 1 {
		t.Fatalf("item 0 chunks %v, want one chunk of steps 0-1 (finalised by EndEpisode)", r0)
	}
	if len(r1) != 2 || r1[0] != r0[0] || r1[1].episode == r0[0].episode || r1[1].start != 0 || r1[1].end != 1 {
		t.Fatalf("item 1 chunks %v, want episode 1's chunk then steps 0-1 of a new episode", r1)
	}
	if len(r2) != 1 || r2[0].episode == r1[1].episode || r2[0].episode == r0[0].episode || r2[0].start != 0 {
		t.Fatalf("item 2 chunks %v, want step 0 of a third episode", r2)
	}
	wtCheckColumn(t, "item 1", samples[1].cols[0], wtStack(t, wtRange(0, 4, wtAct)))
	wtCheckColumn(t, "item 2", samples[2].cols[0], wtStack(t, []client.Tensor{wtAct(4)}))
}

// wtPrefill fills a queue table of size 1 so that later inserts block.
func wtPrefill(t *testing.T, c *client.Client, table string) {
	t.Helper()
	if err := c.Insert(wtCtx(t), []client.Tensor{wtAct(-1)}, map[string]float64{table: 1}); err != nil {
		t.Fatalf("Insert: %v", err)
	}
}

// TestWriterBackpressure checks that CreateItem blocks once
// MaxInFlightItems items are unconfirmed.
func TestWriterBackpressure(t *testing.T) {
	_, c := wtStart(t, server.QueueTable("q", 1))
	wtPrefill(t, c, "q")
	ctx := wtCtx(t)
	// A long chunk length: CreateItem must finalise chunks itself when it
	// has to wait, or the items could never be sent.
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 10, ChunkLength: 10, MaxInFlightItems: 2})
	create := func(ctx context.Context, i int) error {
		if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(i)}); err != nil {
			return err
		}
		return w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(1)})
	}
	for i := range 2 {
		if err := create(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := create(short, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third CreateItem = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("third CreateItem returned after %v, want about 300ms", d)
	}
}

// TestWriterCancelAndClose covers ctx cancellation of blocked calls, Close
// while blocked, and calls after Close.
func TestWriterCancelAndClose(t *testing.T) {
	_, c := wtStart(t, server.QueueTable("q", 1))
	wtPrefill(t, c, "q")
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 2, MaxInFlightItems: 1})
	if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(0)}); err != nil {
		t.Fatal(err)
	}
	traj := []client.TrajectoryColumn{w.History("act").Last(1)}
	if err := w.CreateItem(ctx, "q", 1, traj); err != nil {
		t.Fatal(err)
	}

	for name, call := range map[string]func(context.Context) error{
		"Flush":      w.Flush,
		"CreateItem": func(ctx context.Context) error { return w.CreateItem(ctx, "q", 1, traj) },
		"EndEpisode": func(ctx context.Context) error { return w.EndEpisode(ctx, true) },
	} {
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- call(cctx) }()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s after cancel = %v, want context.Canceled", name, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("%s returned %v after cancel", name, d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not return after cancel", name)
		}
	}
	// Close unblocks a waiting Flush.
	errc := make(chan error, 1)
	go func() { errc <- w.Flush(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, client.ErrClosed) {
		t.Errorf("Flush interrupted by Close = %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	checks := map[string]error{
		"Append":     w.Append(ctx, map[string]client.Tensor{"act": wtAct(1)}),
		"CreateItem": w.CreateItem(ctx, "q", 1, traj),
		"Flush":      w.Flush(ctx),
		"EndEpisode": w.EndEpisode(ctx, false),
		"History":    w.History("act").Last(1).Err(),
	}
	for name, err := range checks {
		if !errors.Is(err, client.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

// TestWriterUnknownTable checks that a NOT_FOUND from the server is sticky.
func TestWriterUnknownTable(t *testing.T) {
	_, c := wtStart(t, server.QueueTable("q", 10))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 2})
	if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(0)}); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateItem(ctx, "missing", 1, []client.TrajectoryColumn{w.History("act").Last(1)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); !errors.Is(err, client.ErrTableNotFound) {
		t.Fatalf("Flush = %v, want ErrTableNotFound", err)
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(1)}); !errors.Is(err, client.ErrTableNotFound) {
		t.Errorf("CreateItem after the failure = %v, want ErrTableNotFound", err)
	}
	if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(1)}); !errors.Is(err, client.ErrTableNotFound) {
		t.Errorf("Append after the failure = %v, want ErrTableNotFound", err)
	}
	if err := w.EndEpisode(ctx, false); !errors.Is(err, client.ErrTableNotFound) {
		t.Errorf("EndEpisode after the failure = %v, want ErrTableNotFound", err)
	}
}

// TestWriterOptions checks option validation.
func TestWriterOptions(t *testing.T) {
	_, c := wtStart(t, server.QueueTable("q", 10))
	for _, opts := range []client.WriterOptions{
		{},
		{NumKeepAliveRefs: -1},
		{NumKeepAliveRefs: 2, ChunkLength: 3},
		{NumKeepAliveRefs: 2, ChunkLength: -1},
		{NumKeepAliveRefs: 2, MaxInFlightItems: -1},
	} {
		if w, err := c.NewTrajectoryWriter(context.Background(), opts); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("NewTrajectoryWriter(%+v) = %v, want ErrInvalidArgument", opts, err)
			if w != nil {
				w.Close()
			}
		}
	}
}

// TestWriterReleasesChunks runs many items through a small table and
// checks that the server does not keep chunks the writer no longer needs
// (keep_chunk_keys shrinks as the history moves on).
func TestWriterReleasesChunks(t *testing.T) {
	s, c := wtStart(t, server.TableConfig{
		Name:        "u",
		Sampler:     selector.Spec{Kind: selector.KindUniform},
		Remover:     selector.Spec{Kind: selector.KindFIFO},
		MaxSize:     5,
		RateLimiter: server.MinSize(1),
	})
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 3, ChunkLength: 1})
	for i := range 200 {
		if err := w.Append(ctx, map[string]client.Tensor{"obs": wtObs(i), "act": wtAct(i)}); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			err := w.CreateItem(ctx, "u", 1, []client.TrajectoryColumn{w.History("obs").Last(2), w.History("act").Last(2)})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// 5 items × 2 columns × 2 chunks, plus the 3-step histories. The
	// server releases chunks after confirming the items of a request, so
	// wait a little.
	const bound = 5*4 + 2*3
	wtWaitFor(t, fmt.Sprintf("the server to hold at most %d chunks", bound), func() bool {
		n, _ := s.ChunkStoreStats()
		return n <= bound
	})
	info, err := c.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info["u"].Inserts; got != 199 {
		t.Errorf("table counted %d inserts, want 199", got)
	}
}

// wtRecorder records the requests a client sends on InsertStreams.
type wtRecorder struct {
	mu      sync.Mutex
	streams [][]*reverbpb.InsertStreamRequest
}

func (r *wtRecorder) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/deepmind.reverb.ReverbService/InsertStream" {
		return cs, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams = append(r.streams, nil)
	return &wtRecordingStream{ClientStream: cs, r: r, id: len(r.streams) - 1}, nil
}

// itemKeys returns the item keys sent on each stream so far.
func (r *wtRecorder) itemKeys() [][]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]uint64, len(r.streams))
	for i, reqs := range r.streams {
		for _, req := range reqs {
			for _, it := range req.GetItems() {
				out[i] = append(out[i], it.GetKey())
			}
		}
	}
	return out
}

type wtRecordingStream struct {
	grpc.ClientStream
	r  *wtRecorder
	id int
}

func (s *wtRecordingStream) SendMsg(m any) error {
	if req, ok := client.InsertRequestProto(m); ok {
		s.r.mu.Lock()
		s.r.streams[s.id] = append(s.r.streams[s.id], req)
		s.r.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

// wtSyncBuffer is a bytes.Buffer safe for concurrent writes (a log sink).
type wtSyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *wtSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *wtSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func wtWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWriterReconnectAfterRestart stops the server while items wait on a
// full queue, starts a new server on the same address, and checks that the
// writer re-sends the unconfirmed items with the same keys.
func TestWriterReconnectAfterRestart(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	serve := func(lis net.Listener, size int64) (*server.Server, chan error) {
		srv, err := server.New(server.Config{Tables: []server.TableConfig{server.QueueTable("q", size)}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(lis) }()
		return srv, done
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	srv1, done1 := serve(lis, 1)
	var serveErr1 error
	stop1 := sync.OnceFunc(func() {
		srv1.Close()
		serveErr1 = <-done1
	})
	defer stop1()

	var rec wtRecorder
	c := wtDial(t, addr, client.WithDialOptions(grpc.WithStreamInterceptor(rec.interceptor)))
	wtPrefill(t, c, "q")
	ctx := wtCtx(t)
	var logs wtSyncBuffer
	w := wtWriter(t, c, client.WriterOptions{
		NumKeepAliveRefs: 3,
		Logger:           slog.New(slog.NewTextHandler(&logs, nil)),
	})
	const items = 3
	for i := range items {
		if err := w.Append(ctx, map[string]client.Tensor{"obs": wtObs(i)}); err != nil {
			t.Fatal(err)
		}
		if err := w.CreateItem(ctx, "q", float64(i), []client.TrajectoryColumn{w.History("obs").At(-1).Squeeze()}); err != nil {
			t.Fatal(err)
		}
	}
	// Finalise the chunks; the items cannot be confirmed.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush = %v, want context.DeadlineExceeded", err)
	}
	wtWaitFor(t, "the items to be sent", func() bool {
		keys := rec.itemKeys()
		return len(keys) > 0 && len(keys[len(keys)-1]) == items
	})
	sentFirst := rec.itemKeys()[len(rec.itemKeys())-1]

	stop1()
	if !errors.Is(serveErr1, server.ErrServerClosed) {
		t.Fatalf("Serve = %v", serveErr1)
	}
	var lis2 net.Listener
	wtWaitFor(t, "the port to be free", func() bool {
		lis2, err = net.Listen("tcp", addr)
		return err == nil
	})
	srv2, done2 := serve(lis2, 10)
	defer func() {
		srv2.Close()
		<-done2
	}()

	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after the restart: %v", err)
	}
	streams := rec.itemKeys()
	resent := streams[len(streams)-1]
	if !slices.Equal(resent, sentFirst) {
		t.Errorf("items re-sent with keys %v, first sent as %v", resent, sentFirst)
	}
	conn := servertest.Dial(t, addr)
	samples := wtSampleN(t, reverbpb.NewReverbServiceClient(conn), "q", items)
	for i, smp := range samples {
		if smp.item.GetKey() != sentFirst[i] {
			t.Errorf("sample %d has key %d, want %d", i, smp.item.GetKey(), sentFirst[i])
		}
		wtCheckColumn(t, fmt.Sprintf("sample %d", i), smp.cols[0], wtObs(i))
	}
	if !bytes.Contains([]byte(logs.String()), []byte("level=WARN")) {
		t.Errorf("no reconnect warning logged; logs:\n%s", logs.String())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// wtProxy forwards TCP connections to a server and can hide the server's
// replies or drop every connection.
type wtProxy struct {
	lis    net.Listener
	target string
	mute   atomic.Bool // discard server-to-client bytes
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func wtStartProxy(t *testing.T, target string) *wtProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &wtProxy{lis: lis, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *wtProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			down.Close()
			up.Close()
			continue
		}
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			io.Copy(up, down)
			up.Close()
		}()
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 && !p.mute.Load() {
					if _, werr := down.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			down.Close()
		}()
	}
}

// drop closes every connection made so far.
func (p *wtProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *wtProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.lis.Close()
	p.drop()
	p.wg.Wait()
}

// TestWriterResendKeepsKeys loses the confirmations of items the server
// applied, then breaks the connection: the writer re-sends the items with
// the same keys, which the server treats as updates, so nothing is
// inserted twice.
func TestWriterResendKeepsKeys(t *testing.T) {
	s := servertest.Start(t, server.Config{Tables: []server.TableConfig{server.QueueTable("q", 100)}})
	proxy := wtStartProxy(t, s.Addr)
	var rec wtRecorder
	c := wtDial(t, proxy.lis.Addr().String(), client.WithDialOptions(grpc.WithStreamInterceptor(rec.interceptor)))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 4, ChunkLength: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	proxy.mute.Store(true)
	const items = 5
	for i := range items + 1 {
		if err := w.Append(ctx, map[string]client.Tensor{"obs": wtObs(i)}); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("obs").Last(2)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush without confirmations = %v, want context.DeadlineExceeded", err)
	}
	wtWaitFor(t, "the server to apply the items", func() bool {
		info, err := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
		return err == nil && info.GetTableInfo()[0].GetCurrentSize() == items
	})
	proxy.mute.Store(false)
	proxy.drop()
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after reconnecting: %v", err)
	}
	streams := rec.itemKeys()
	if len(streams) < 2 || !slices.Equal(streams[0], streams[len(streams)-1]) {
		t.Errorf("item keys by stream %v, want the same keys on the first and the last stream", streams)
	}
	info, err := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ti := info.GetTableInfo()[0]
	if ti.GetCurrentSize() != items || ti.GetRateLimiterInfo().GetInsertStats().GetCompleted() != items {
		t.Errorf("table holds %d items after %d inserts, want %d and %d",
			ti.GetCurrentSize(), ti.GetRateLimiterInfo().GetInsertStats().GetCompleted(), items, items)
	}
	for k, smp := range wtSampleN(t, s.Client, "q", items) {
		wtCheckColumn(t, fmt.Sprintf("sample %d", k), smp.cols[0], wtStack(t, wtRange(k, k+2, wtObs)))
	}
}

// TestWriterClientClosed checks that a writer whose client was closed fails
// with ErrClosed instead of reconnecting forever.
func TestWriterClientClosed(t *testing.T) {
	s := servertest.Start(t, server.Config{Tables: []server.TableConfig{server.QueueTable("q", 10)}})
	ctx := wtCtx(t)
	c, err := client.Dial(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := w.Append(ctx, map[string]client.Tensor{"act": wtAct(0)}); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(1)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The open stream fails at once; CreateItem may see that already.
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("act").Last(1)}); err != nil && !errors.Is(err, client.ErrClosed) {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Flush after the client was closed = %v, want ErrClosed", err)
	}
}
