package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
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

// --- helpers ---------------------------------------------------------------

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func uniformTable(name string) server.TableConfig {
	return server.TableConfig{
		Name:        name,
		Sampler:     selector.Spec{Kind: selector.KindUniform},
		Remover:     selector.Spec{Kind: selector.KindFIFO},
		MaxSize:     1000,
		RateLimiter: server.MinSize(1),
	}
}

func prioritizedTable(name string) server.TableConfig {
	tc := uniformTable(name)
	tc.Sampler = selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 1}
	return tc
}

func startServer(t *testing.T, tables ...server.TableConfig) *servertest.Server {
	t.Helper()
	return servertest.Start(t, server.Config{Tables: tables})
}

// waitPending waits up to 5 s for the server to hold want sample requests
// pending on table.
func waitPending(t *testing.T, srv *servertest.Server, table string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, pending, _ := srv.Pending(table)
		if pending == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sample requests pending on the server, want %d", pending, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dial(t *testing.T, addr string, opts ...client.Option) *client.Client {
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

func newSampler(t *testing.T, c *client.Client, opts client.SamplerOptions) *client.Sampler {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	s, err := c.NewSampler(opts)
	if err != nil {
		t.Fatalf("NewSampler: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// chunk encodes columns (each [T, ...]) into one chunk with a fresh key.
func chunk(t *testing.T, cols ...client.Tensor) *reverbpb.ChunkData {
	t.Helper()
	rows := cols[0].Shape[0]
	c, err := client.EncodeChunk(client.NewKey(), &reverbpb.SequenceRange{EpisodeId: 1, Start: 0, End: int32(rows - 1)}, cols, false)
	if err != nil {
		t.Fatalf("EncodeChunk: %v", err)
	}
	return c
}

// slice references rows [offset, offset+length) of tensor index of c.
func slice(c *reverbpb.ChunkData, index, offset, length int32) *reverbpb.FlatTrajectory_ChunkSlice {
	return &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: c.GetChunkKey(), Index: index, Offset: offset, Length: length}
}

func column(squeeze bool, slices ...*reverbpb.FlatTrajectory_ChunkSlice) *reverbpb.FlatTrajectory_Column {
	return &reverbpb.FlatTrajectory_Column{ChunkSlices: slices, Squeeze: squeeze}
}

func item(table string, prio float64, cols ...*reverbpb.FlatTrajectory_Column) *reverbpb.PrioritizedItem {
	return &reverbpb.PrioritizedItem{
		Key:            client.NewKey(),
		Table:          table,
		Priority:       prio,
		FlatTrajectory: &reverbpb.FlatTrajectory{Columns: cols},
	}
}

// insert sends chunks and items in one request on a new InsertStream and
// waits until every item is confirmed.
func insert(t *testing.T, rpc reverbpb.ReverbServiceClient, chunks []*reverbpb.ChunkData, items ...*reverbpb.PrioritizedItem) {
	t.Helper()
	st, err := rpc.InsertStream(testCtx(t), grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("InsertStream: %v", err)
	}
	if err := st.Send(&reverbpb.InsertStreamRequest{Chunks: chunks, Items: items}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("InsertStream send: %v", err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatalf("InsertStream CloseSend: %v", err)
	}
	confirmed := 0
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("InsertStream: %v", err)
		}
		confirmed += len(resp.GetKeys())
	}
	if confirmed != len(items) {
		t.Fatalf("InsertStream confirmed %d of %d items", confirmed, len(items))
	}
}

// insertScalars inserts one item per value, each a one-row squeezed
// float32 column holding the value, and returns the item keys in order.
func insertScalars(t *testing.T, rpc reverbpb.ReverbServiceClient, table string, vals ...float32) []uint64 {
	t.Helper()
	var keys []uint64
	for _, v := range vals {
		c := chunk(t, client.Vector([]float32{v}))
		it := item(table, 1, column(true, slice(c, 0, 0, 1)))
		insert(t, rpc, []*reverbpb.ChunkData{c}, it)
		keys = append(keys, it.GetKey())
	}
	return keys
}

func tableInfo(t *testing.T, c *client.Client, table string) client.TableInfo {
	t.Helper()
	infos, err := c.ServerInfo(testCtx(t))
	if err != nil {
		t.Fatalf("ServerInfo: %v", err)
	}
	ti, ok := infos[table]
	if !ok {
		t.Fatalf("ServerInfo has no table %q", table)
	}
	return ti
}

// collect ranges over Samples and returns the samples and the final error.
func collect(ctx context.Context, s *client.Sampler, limit int) ([]client.Sample, error) {
	var out []client.Sample
	for smp, err := range s.Samples(ctx) {
		if err != nil {
			return out, err
		}
		out = append(out, smp)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// must returns tn, panicking on a constructor error (test inputs are
// constant).
func must(tn client.Tensor, err error) client.Tensor {
	if err != nil {
		panic(err)
	}
	return tn
}

func floats(t *testing.T, tn client.Tensor) []float32 {
	t.Helper()
	v, err := client.Values[float32](tn)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// --- info ------------------------------------------------------------------

func TestSamplerInfoUniform(t *testing.T) {
	srv := startServer(t, uniformTable("uniform"))
	c := dial(t, srv.Addr)
	keys := insertScalars(t, srv.Client, "uniform", 1, 2, 3, 4)
	prio := map[uint64]bool{}
	for _, k := range keys {
		prio[k] = true
	}
	before := time.Now().Add(-time.Minute)

	s := newSampler(t, c, client.SamplerOptions{Table: "uniform", MaxSamples: 40, MaxInFlightSamplesPerWorker: 3})
	samples, err := collect(testCtx(t), s, -1)
	if err != nil {
		t.Fatalf("Samples: %v", err)
	}
	if len(samples) != 40 {
		t.Fatalf("got %d samples, want 40", len(samples))
	}
	seen := map[uint64]int32{}
	for i, smp := range samples {
		in := smp.Info
		if !prio[in.Key] {
			t.Fatalf("sample %d: unknown key %d", i, in.Key)
		}
		seen[in.Key]++
		if in.TimesSampled != seen[in.Key] {
			t.Errorf("sample %d: times_sampled %d, want %d", i, in.TimesSampled, seen[in.Key])
		}
		if in.Table != "uniform" || in.Priority != 1 || in.TableSize != 4 || in.Probability != 0.25 {
			t.Errorf("sample %d: info %+v, want table uniform, priority 1, table size 4, probability 0.25", i, in)
		}
		if in.InsertedAt.IsZero() || in.InsertedAt.Before(before) || in.InsertedAt.After(time.Now()) {
			t.Errorf("sample %d: inserted_at %v", i, in.InsertedAt)
		}
		if got := floats(t, smp.Columns[0]); len(got) != 1 || len(smp.Columns[0].Shape) != 0 {
			t.Errorf("sample %d: column %v, want a squeezed scalar", i, smp.Columns[0].Shape)
		}
	}
	if ti := tableInfo(t, c, "uniform"); ti.Samples != 40 {
		t.Errorf("table sample count %d, want 40", ti.Samples)
	}
}

func TestSamplerInfoPrioritized(t *testing.T) {
	srv := startServer(t, prioritizedTable("prio"))
	c := dial(t, srv.Addr)
	want := map[uint64]float64{}
	var chunks []*reverbpb.ChunkData
	var items []*reverbpb.PrioritizedItem
	for _, p := range []float64{1, 2, 3, 4} {
		ch := chunk(t, client.Vector([]float32{float32(p)}))
		it := item("prio", p, column(true, slice(ch, 0, 0, 1)))
		chunks = append(chunks, ch)
		items = append(items, it)
		want[it.GetKey()] = p
	}
	insert(t, srv.Client, chunks, items...)

	s := newSampler(t, c, client.SamplerOptions{Table: "prio", MaxSamples: 20})
	samples, err := collect(testCtx(t), s, -1)
	if err != nil || len(samples) != 20 {
		t.Fatalf("got %d samples, err %v; want 20", len(samples), err)
	}
	for _, smp := range samples {
		p, ok := want[smp.Info.Key]
		if !ok {
			t.Fatalf("unknown key %d", smp.Info.Key)
		}
		if smp.Info.Priority != p || math.Abs(smp.Info.Probability-p/10) > 1e-9 {
			t.Errorf("key %d: priority %v probability %v, want %v and %v", smp.Info.Key, smp.Info.Priority, smp.Info.Probability, p, p/10)
		}
		if got := floats(t, smp.Columns[0]); got[0] != float32(p) {
			t.Errorf("key %d: column %v, want [%v]", smp.Info.Key, got, p)
		}
	}
}

// --- decoding --------------------------------------------------------------

func TestSamplerDecodesColumns(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)

	// Two legacy-writer chunks of two columns each: obs [rows, 2] float32
	// and step [rows] int64 (int64 columns of rank 1 are never
	// delta-encoded); plus a one-column string chunk.
	obsA := must(client.FromSlice([]float32{0, 1, 10, 11, 20, 21}, 3, 2))
	stepA := client.Vector([]int64{0, 1, 2})
	obsB := must(client.FromSlice([]float32{30, 31, 40, 41}, 2, 2))
	stepB := client.Vector([]int64{3, 4})
	a, b := chunk(t, obsA, stepA), chunk(t, obsB, stepB)
	strs := chunk(t, must(client.FromStrings([]string{"x", "yz", ""}, 3)))

	// Item 1: rows 1..4 (A[1:3] + B[0:2]) of both columns, and the string
	// row 1 squeezed.
	multi := item("queue", 1,
		column(false, slice(a, 0, 1, 2), slice(b, 0, 0, 2)),
		column(false, slice(a, 1, 1, 2), slice(b, 1, 0, 2)),
		column(true, slice(strs, 0, 1, 1)),
	)
	// Item 2: the whole of chunk B's obs column, and step row 0 of A
	// squeezed.
	whole := item("queue", 1,
		column(false, slice(b, 0, 0, 2)),
		column(true, slice(a, 1, 0, 1)),
	)
	insert(t, srv.Client, []*reverbpb.ChunkData{a, b, strs}, multi, whole)

	s := newSampler(t, c, client.SamplerOptions{Table: "queue", MaxSamples: 2})
	samples, err := collect(testCtx(t), s, -1)
	if err != nil || len(samples) != 2 {
		t.Fatalf("got %d samples, err %v; want 2", len(samples), err)
	}
	// The queue is FIFO.
	if samples[0].Info.Key != multi.GetKey() || samples[1].Info.Key != whole.GetKey() {
		t.Fatalf("keys %d, %d; want %d, %d", samples[0].Info.Key, samples[1].Info.Key, multi.GetKey(), whole.GetKey())
	}
	want1 := []client.Tensor{
		must(client.FromSlice([]float32{10, 11, 20, 21, 30, 31, 40, 41}, 4, 2)),
		client.Vector([]int64{1, 2, 3, 4}),
		must(client.FromStrings([]string{"yz"})),
	}
	want2 := []client.Tensor{obsB, client.Scalar[int64](0)}
	for i, want := range [][]client.Tensor{want1, want2} {
		got := samples[i].Columns
		if len(got) != len(want) {
			t.Fatalf("sample %d: %d columns, want %d", i, len(got), len(want))
		}
		for j := range want {
			if !got[j].Equal(want[j]) {
				t.Errorf("sample %d column %d: got %v %v, want %v %v", i, j, got[j].DType, got[j].Shape, want[j].DType, want[j].Shape)
			}
		}
	}
}

func TestSamplerDeltaEncodedChunk(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	col := must(client.FromSlice([]int32{5, 6, 7, 9, 12, 20}, 3, 2))
	ch, err := client.EncodeChunk(client.NewKey(), &reverbpb.SequenceRange{EpisodeId: 1, End: 2}, []client.Tensor{col}, true)
	if err != nil {
		t.Fatal(err)
	}
	insert(t, srv.Client, []*reverbpb.ChunkData{ch}, item("queue", 1, column(false, slice(ch, 0, 1, 2))))
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", MaxSamples: 1})
	smp, err := s.Next(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := must(client.FromSlice([]int32{7, 9, 12, 20}, 2, 2))
	if !smp.Columns[0].Equal(want) {
		t.Errorf("got %v, want %v", smp.Columns[0], want)
	}
	if _, err := s.Next(testCtx(t)); !errors.Is(err, io.EOF) {
		t.Errorf("Next after MaxSamples: %v, want io.EOF", err)
	}
}

func TestSamplerMalformedSample(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	ch := chunk(t, client.Vector([]float32{1, 2, 3}))
	good := item("queue", 1, column(false, slice(ch, 0, 0, 3)))
	// The server stores chunks without decoding them, so a corrupt
	// payload only shows when the sample is decoded.
	corrupt := chunk(t, client.Vector([]float32{1, 2, 3}))
	corrupt.Data.Tensors[0].TensorContent = []byte("not snappy")
	bad := item("queue", 1, column(false, slice(corrupt, 0, 0, 3)))
	insert(t, srv.Client, []*reverbpb.ChunkData{ch, corrupt}, good, bad)

	s := newSampler(t, c, client.SamplerOptions{Table: "queue"})
	samples, err := collect(testCtx(t), s, -1)
	if len(samples) != 1 || samples[0].Info.Key != good.GetKey() {
		t.Errorf("got %d samples before the error, want the good one", len(samples))
	}
	if !errors.Is(err, client.ErrMalformedSample) {
		t.Fatalf("err %v, want ErrMalformedSample", err)
	}
	t.Logf("error: %v", err)
	if _, err2 := s.Next(testCtx(t)); !errors.Is(err2, client.ErrMalformedSample) {
		t.Errorf("second Next: %v, want the same error", err2)
	}
}

// --- budget ----------------------------------------------------------------

func TestSamplerMaxSamplesNeverOverSamples(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	insertScalars(t, srv.Client, "queue", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)

	s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 3, MaxInFlightSamplesPerWorker: 4, MaxSamples: 7})
	samples, err := collect(testCtx(t), s, -1)
	if err != nil {
		t.Fatalf("Samples: %v", err)
	}
	if len(samples) != 7 {
		t.Fatalf("got %d samples, want 7", len(samples))
	}
	seen := map[float32]bool{}
	for _, smp := range samples {
		v := floats(t, smp.Columns[0])[0]
		if seen[v] {
			t.Errorf("value %v sampled twice from a queue", v)
		}
		seen[v] = true
	}
	// Iteration ended, so every worker has exited: the counts are final.
	ti := tableInfo(t, c, "queue")
	if ti.Samples != 7 || ti.CurrentSize != 3 {
		t.Errorf("table: %d samples, size %d; want 7 and 3", ti.Samples, ti.CurrentSize)
	}
	if _, err := s.Next(testCtx(t)); !errors.Is(err, io.EOF) {
		t.Errorf("Next after MaxSamples: %v, want io.EOF", err)
	}
}

// countStreams is a client interceptor that counts SampleStream opens.
func countStreams(n *atomic.Int64) client.Option {
	return client.WithDialOptions(grpc.WithStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method == "/deepmind.reverb.ReverbService/SampleStream" {
				n.Add(1)
			}
			return streamer(ctx, desc, cc, method, opts...)
		}))
}

func TestSamplerMaxSamplesPerStream(t *testing.T) {
	srv := startServer(t, uniformTable("uniform"))
	var streams atomic.Int64
	c := dial(t, srv.Addr, countStreams(&streams))
	insertScalars(t, srv.Client, "uniform", 1, 2)

	s := newSampler(t, c, client.SamplerOptions{Table: "uniform", MaxSamples: 10, MaxSamplesPerStream: 3, MaxInFlightSamplesPerWorker: 2})
	samples, err := collect(testCtx(t), s, -1)
	if err != nil || len(samples) != 10 {
		t.Fatalf("got %d samples, err %v; want 10", len(samples), err)
	}
	if got := streams.Load(); got != 4 { // 3 + 3 + 3 + 1
		t.Errorf("opened %d streams, want 4", got)
	}
	if ti := tableInfo(t, c, "uniform"); ti.Samples != 10 {
		t.Errorf("table sample count %d, want 10", ti.Samples)
	}
}

func TestSamplerManyWorkersUnlimited(t *testing.T) {
	srv := startServer(t, uniformTable("uniform"))
	c := dial(t, srv.Addr)
	insertScalars(t, srv.Client, "uniform", 1, 2, 3)
	s := newSampler(t, c, client.SamplerOptions{Table: "uniform", NumWorkers: 4, MaxInFlightSamplesPerWorker: 5, MaxSamplesPerStream: 7})

	// Two consumers pull concurrently.
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var total atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				if _, err := s.Next(ctx); err != nil {
					t.Errorf("Next: %v", err)
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	if total.Load() != 300 {
		t.Errorf("got %d samples, want 300", total.Load())
	}
	s.Close()
	if _, err := s.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
}

// TestSamplerConcurrentConsumersQueue has three goroutines share a
// sampler of a queue whose samples arrive in batches of several per
// response: every item must be returned exactly once.
func TestSamplerConcurrentConsumersQueue(t *testing.T) {
	const n = 400
	srv := startServer(t, server.QueueTable("queue", n))
	c := dial(t, srv.Addr)
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i)
	}
	insertScalars(t, srv.Client, "queue", vals...)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 2, MaxInFlightSamplesPerWorker: 16, MaxSamples: n})

	ctx := testCtx(t)
	var mu sync.Mutex
	seen := map[float32]int{}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				smp, err := s.Next(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					t.Errorf("Next: %v", err)
					return
				}
				mu.Lock()
				seen[floats(t, smp.Columns[0])[0]]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("got %d distinct items, want %d", len(seen), n)
	}
	for v, k := range seen {
		if k != 1 {
			t.Errorf("item %v returned %d times", v, k)
		}
	}
}

// TestSamplerNoSampleAfterEOF: with several callers of Next, once one
// gets io.EOF none gets a sample: a caller that finds the samples run
// out waits for one that took the last batch to leave the rest of it.
func TestSamplerNoSampleAfterEOF(t *testing.T) {
	const n = 64
	srv := startServer(t, server.QueueTable("queue", 100*n))
	c := dial(t, srv.Addr)
	vals := make([]float32, 100*n)
	insertScalars(t, srv.Client, "queue", vals...)
	ctx := testCtx(t)
	for round := range 100 {
		// One request of n: the whole sampler is one batch.
		s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 1, MaxInFlightSamplesPerWorker: n, MaxSamples: n})
		var eof atomic.Bool
		var got atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					// A call that starts after another returned io.EOF
					// must return io.EOF too.
					after := eof.Load()
					_, err := s.Next(ctx)
					if errors.Is(err, io.EOF) {
						eof.Store(true)
						return
					}
					if err != nil {
						t.Errorf("round %d: Next: %v", round, err)
						return
					}
					got.Add(1)
					if after {
						t.Errorf("round %d: a sample from a call that began after another caller got io.EOF", round)
					}
				}
			})
		}
		wg.Wait()
		if got.Load() != n {
			t.Fatalf("round %d: %d samples, want %d", round, got.Load(), n)
		}
		s.Close()
	}
}

// --- errors and termination -------------------------------------------------

func TestSamplerRateLimiterTimeout(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", RateLimiterTimeout: 100 * time.Millisecond})
	start := time.Now()
	samples, err := collect(testCtx(t), s, -1)
	elapsed := time.Since(start)
	if len(samples) != 0 {
		t.Errorf("got %d samples from an empty queue", len(samples))
	}
	if !errors.Is(err, client.ErrRateLimiterTimeout) {
		t.Fatalf("err %v, want ErrRateLimiterTimeout", err)
	}
	if elapsed < 100*time.Millisecond {
		t.Errorf("timed out after %v, want >= 100ms", elapsed)
	}
}

func TestSamplerUnknownTable(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	s := newSampler(t, c, client.SamplerOptions{Table: "nope", NumWorkers: 2})
	_, err := collect(testCtx(t), s, -1)
	if !errors.Is(err, client.ErrTableNotFound) {
		t.Fatalf("err %v, want ErrTableNotFound", err)
	}
}

func TestSamplerContextCancel(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue"}) // waits forever
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := collect(ctx, s, -1)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancellation took %v", d)
	}

	// The sampler is still usable with a live context.
	insertScalars(t, srv.Client, "queue", 42)
	smp, err := s.Next(testCtx(t))
	if err != nil || floats(t, smp.Columns[0])[0] != 42 {
		t.Fatalf("Next after cancel: %v, %v", smp, err)
	}

	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = collect(testCtx(t), s, -1)
	if !errors.Is(err, client.ErrClosed) {
		t.Errorf("Samples after Close: %v, want ErrClosed", err)
	}
}

func TestSamplerCloseWhileBlocked(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 3})
	errc := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background())
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-errc:
		if !errors.Is(err, client.ErrClosed) {
			t.Errorf("blocked Next returned %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocked Next did not return after Close")
	}
	// The server dropped the stream's pending sample request.
	waitPending(t, srv, "queue", 0)
}

func TestSamplerClientClosed(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue"})
	time.AfterFunc(50*time.Millisecond, func() { c.Close() })
	_, err := collect(testCtx(t), s, -1)
	if !errors.Is(err, client.ErrClosed) {
		t.Fatalf("err %v, want ErrClosed", err)
	}
}

func TestNewSamplerInvalidOptions(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	for _, opts := range []client.SamplerOptions{
		{},
		{Table: "queue", NumWorkers: -1},
		{Table: "queue", MaxInFlightSamplesPerWorker: -1},
		{Table: "queue", MaxSamples: -1},
		{Table: "queue", MaxSamplesPerStream: -1},
	} {
		if s, err := c.NewSampler(opts); !errors.Is(err, client.ErrInvalidArgument) {
			if s != nil {
				s.Close()
			}
			t.Errorf("NewSampler(%+v): %v, want ErrInvalidArgument", opts, err)
		}
	}
}

// TestSamplerLargestOptions: MaxSamples and RateLimiterTimeout at the
// largest values their types hold. Working out the number of workers from
// MaxSamples used to overflow to a negative count, and NewSampler panicked
// making a channel of that size; rounding the timeout up to milliseconds
// overflowed to a negative one, sent as "wait forever" by accident.
func TestSamplerLargestOptions(t *testing.T) {
	srv := startServer(t, uniformTable("uniform"))
	var mu sync.Mutex
	var timeouts []int64
	record := client.WithDialOptions(grpc.WithStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != "/deepmind.reverb.ReverbService/SampleStream" {
				return cs, err
			}
			return &sendRecorder{ClientStream: cs, sent: func(m any) {
				if req, ok := m.(*reverbpb.SampleStreamRequest); ok {
					mu.Lock()
					timeouts = append(timeouts, req.GetRateLimiterTimeout().GetMilliseconds())
					mu.Unlock()
				}
			}}, nil
		}))
	c := dial(t, srv.Addr, record)
	insertScalars(t, srv.Client, "uniform", 1)
	s := newSampler(t, c, client.SamplerOptions{Table: "uniform", NumWorkers: 2, MaxInFlightSamplesPerWorker: 3,
		MaxSamples: math.MaxInt64, RateLimiterTimeout: math.MaxInt64})
	samples, err := collect(testCtx(t), s, 10)
	if err != nil || len(samples) != 10 {
		t.Fatalf("got %d samples, err %v; want 10", len(samples), err)
	}
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	const want = math.MaxInt64/int64(time.Millisecond) + 1 // rounded up
	if len(timeouts) == 0 {
		t.Fatal("no sample request recorded")
	}
	for _, ms := range timeouts {
		if ms != want {
			t.Fatalf("request rate_limiter_timeout %d ms, want %d", ms, want)
		}
	}
}

// sendRecorder passes every message sent on a client stream to sent.
type sendRecorder struct {
	grpc.ClientStream
	sent func(any)
}

func (r *sendRecorder) SendMsg(m any) error {
	r.sent(m)
	return r.ClientStream.SendMsg(m)
}

// --- batches ---------------------------------------------------------------

func insertMatrices(t *testing.T, rpc reverbpb.ReverbServiceClient, table string, rows int64, n int) {
	t.Helper()
	for i := range n {
		vals := make([]float32, rows*3)
		for j := range vals {
			vals[j] = float32(i*100 + j)
		}
		m := must(client.FromSlice(vals, rows, 3))
		ch := chunk(t, m)
		insert(t, rpc, []*reverbpb.ChunkData{ch}, item(table, 1, column(false, slice(ch, 0, 0, int32(rows)))))
	}
}

func TestSamplerBatches(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	insertMatrices(t, srv.Client, "queue", 2, 6)

	s := newSampler(t, c, client.SamplerOptions{Table: "queue", MaxSamples: 6})
	var sizes []int
	for b, err := range s.Batches(testCtx(t), 4) {
		if err != nil {
			t.Fatalf("Batches: %v", err)
		}
		n := len(b.Infos)
		sizes = append(sizes, n)
		if len(b.Columns) != 1 {
			t.Fatalf("%d columns, want 1", len(b.Columns))
		}
		if got := b.Columns[0].Shape; len(got) != 3 || got[0] != int64(n) || got[1] != 2 || got[2] != 3 {
			t.Errorf("batch column shape %v, want [%d 2 3]", got, n)
		}
		if len(sizes) == 1 {
			vals := floats(t, b.Columns[0])
			if vals[0] != 0 || vals[6] != 100 || vals[23] != 305 {
				t.Errorf("batch values %v", vals)
			}
		}
	}
	if len(sizes) != 2 || sizes[0] != 4 || sizes[1] != 2 {
		t.Errorf("batch sizes %v, want [4 2]", sizes)
	}
}

func TestSamplerBatchesPartialOnTimeout(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	insertMatrices(t, srv.Client, "queue", 2, 3)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", RateLimiterTimeout: 100 * time.Millisecond})
	var sizes []int
	var last error
	for b, err := range s.Batches(testCtx(t), 4) {
		if err != nil {
			last = err
			continue
		}
		sizes = append(sizes, len(b.Infos))
	}
	if len(sizes) != 1 || sizes[0] != 3 {
		t.Errorf("batch sizes %v, want [3]", sizes)
	}
	if !errors.Is(last, client.ErrRateLimiterTimeout) {
		t.Errorf("final error %v, want ErrRateLimiterTimeout", last)
	}
}

// TestSamplerBatchesHugeSize: a batch size far above the samples there
// are, here as many as an int holds, gathers what comes. Batches used to
// allocate room for n samples up front, which panicked for math.MaxInt
// (and took that much memory for a large valid n).
func TestSamplerBatchesHugeSize(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	insertMatrices(t, srv.Client, "queue", 2, 3)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", MaxSamples: 3})
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Batches(ctx, math.MaxInt) panicked: %v", r)
		}
	}()
	var sizes []int
	for b, err := range s.Batches(testCtx(t), math.MaxInt) {
		if err != nil {
			t.Fatalf("Batches: %v", err)
		}
		sizes = append(sizes, len(b.Infos))
	}
	if len(sizes) != 1 || sizes[0] != 3 {
		t.Errorf("batch sizes %v, want [3]", sizes)
	}

	// Batches larger than the room made up front still fill.
	srv = startServer(t, uniformTable("uniform"))
	c = dial(t, srv.Addr)
	insertScalars(t, srv.Client, "uniform", 1)
	s = newSampler(t, c, client.SamplerOptions{Table: "uniform", MaxSamples: 700})
	sizes = nil
	for b, err := range s.Batches(testCtx(t), 300) {
		if err != nil {
			t.Fatalf("Batches: %v", err)
		}
		sizes = append(sizes, len(b.Infos))
		if got := b.Columns[0].Shape; len(got) != 1 || got[0] != int64(len(b.Infos)) {
			t.Errorf("batch column shape %v, want [%d]", got, len(b.Infos))
		}
	}
	if len(sizes) != 3 || sizes[0] != 300 || sizes[1] != 300 || sizes[2] != 100 {
		t.Errorf("batch sizes %v, want [300 300 100]", sizes)
	}
}

func TestSamplerBatchesShapeMismatch(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	insertMatrices(t, srv.Client, "queue", 2, 1)
	insertMatrices(t, srv.Client, "queue", 3, 1)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", MaxSamples: 2})
	var errs []error
	for _, err := range s.Batches(testCtx(t), 2) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], client.ErrInvalidArgument) {
		t.Fatalf("got %v, want one ErrInvalidArgument", errs)
	}
	t.Logf("error: %v", errs[0])
}

// --- server restart --------------------------------------------------------

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// serveOn starts a server for cfg on lis and returns a stop function that
// closes it and waits for Serve to return.
func serveOn(t *testing.T, lis net.Listener) (*server.Server, func()) {
	t.Helper()
	srv, err := server.New(server.Config{Tables: []server.TableConfig{uniformTable("uniform")}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { srv.Serve(lis); close(served) }()
	var once sync.Once
	stop := func() { once.Do(func() { srv.Close(); <-served }) }
	t.Cleanup(stop)
	return srv, stop
}

func TestSamplerServerRestart(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_, stop := serveOn(t, lis)
	raw := reverbpb.NewReverbServiceClient(servertest.Dial(t, addr))
	first := insertScalars(t, raw, "uniform", 1)

	var logs syncBuffer
	c := dial(t, addr)
	const maxSamples = 50
	s := newSampler(t, c, client.SamplerOptions{Table: "uniform", NumWorkers: 2, MaxInFlightSamplesPerWorker: 2,
		MaxSamples: maxSamples, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := testCtx(t)
	total := 0
	for range 5 {
		total++
		smp, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if smp.Info.Key != first[0] {
			t.Fatalf("key %d, want %d", smp.Info.Key, first[0])
		}
	}

	stop()
	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("relisten on %s: %v", addr, err)
	}
	serveOn(t, lis2)
	raw = reverbpb.NewReverbServiceClient(servertest.Dial(t, addr))
	second := insertScalars(t, raw, "uniform", 2)

	// Samples the old server sent before it stopped, then the new server's
	// item, until MaxSamples samples were returned in all: requests the old
	// server did not complete are not counted.
	fromSecond := 0
	for {
		smp, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next after restart: %v", err)
		}
		total++
		switch smp.Info.Key {
		case first[0]:
			// Received from the old server before it stopped.
		case second[0]:
			fromSecond++
			if got := floats(t, smp.Columns[0])[0]; got != 2 {
				t.Errorf("value %v, want 2", got)
			}
		default:
			t.Fatalf("unexpected key %d", smp.Info.Key)
		}
	}
	if total != maxSamples || fromSecond == 0 {
		t.Errorf("got %d samples, %d from the new server; want %d in all", total, fromSecond, maxSamples)
	}
	if ti := tableInfo(t, c, "uniform"); ti.Samples != int64(fromSecond) {
		t.Errorf("new server counted %d samples, the sampler returned %d of its item", ti.Samples, fromSecond)
	}
	if !bytes.Contains([]byte(logs.String()), []byte("reopening")) {
		t.Errorf("no reopen warning logged; logs:\n%s", logs.String())
	}
}

// TestSamplerSamplesSplitOverResponses samples items whose chunks do not
// fit one response (the server starts a new one after 2 MiB of chunks),
// so that a sample's chunks arrive in several messages, each over many
// gRPC buffers, while the sampler recycles buffers for later ones.
func TestSamplerSamplesSplitOverResponses(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 20))
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	w, err := c.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 3, ChunkLength: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	row := func(i int) client.Tensor {
		vals := make([]float32, 300_000) // 1.2 MB that Snappy cannot shrink
		r := rand.New(rand.NewPCG(uint64(i), 1))
		for j := range vals {
			vals[j] = r.Float32()
		}
		return client.Vector(vals)
	}
	const n = 12
	for i := range n {
		if err := w.Append(ctx, map[string]client.Tensor{"x": row(i)}); err != nil {
			t.Fatal(err)
		}
		if i >= 2 {
			if err := w.CreateItem(ctx, "queue", 1, []client.TrajectoryColumn{w.History("x").Last(3), w.History("x").At(-2).Squeeze()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", MaxSamples: n - 2, MaxInFlightSamplesPerWorker: 3})
	samples, err := collect(ctx, s, -1)
	if err != nil || len(samples) != n-2 {
		t.Fatalf("got %d samples, err %v; want %d", len(samples), err, n-2)
	}
	for k, smp := range samples {
		last := k + 2
		want, err := client.Stack([]client.Tensor{row(last - 2), row(last - 1), row(last)})
		if err != nil {
			t.Fatal(err)
		}
		if !smp.Columns[0].Equal(want) {
			t.Errorf("sample %d: column 0 differs from steps %d..%d", k, last-2, last)
		}
		if !smp.Columns[1].Equal(row(last - 1)) {
			t.Errorf("sample %d: column 1 differs from step %d", k, last-1)
		}
	}
}

// --- terminal errors with samples in hand -----------------------------------

// TestSamplerTerminalErrorKeepsReceivedSamples: a queue of 6 items is
// sampled by 4 workers of 1 sample each while the consumer is slow, so
// that the buffer fills and two workers wait with a sample in hand. The
// other workers' next requests time out at the rate limiter, which ends
// iteration, but only after every sample the queue gave out was returned.
func TestSamplerTerminalErrorKeepsReceivedSamples(t *testing.T) {
	const n = 6
	srv := startServer(t, server.QueueTable("queue", n))
	c := dial(t, srv.Addr)
	insertScalars(t, srv.Client, "queue", 0, 1, 2, 3, 4, 5)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 4, MaxInFlightSamplesPerWorker: 1,
		RateLimiterTimeout: 200 * time.Millisecond})
	time.Sleep(time.Second) // the slow consumer: the workers time out meanwhile
	samples, err := collect(testCtx(t), s, -1)
	if !errors.Is(err, client.ErrRateLimiterTimeout) {
		t.Fatalf("err %v, want ErrRateLimiterTimeout", err)
	}
	ti := tableInfo(t, c, "queue")
	if int64(len(samples)) != ti.Samples || len(samples) != n {
		t.Errorf("returned %d samples, the queue gave out %d; want %d", len(samples), ti.Samples, n)
	}
}

// TestSamplerTerminalErrorDrainsRequestInFlight: one worker fails on a
// malformed sample while another's request waits at the rate limiter. The
// waiting request is not cancelled at once: an item inserted soon after is
// served to it and returned before the error.
func TestSamplerTerminalErrorDrainsRequestInFlight(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 2, MaxInFlightSamplesPerWorker: 1})
	waitPending(t, srv, "queue", 2) // both workers wait on the empty queue

	corrupt := chunk(t, client.Vector([]float32{1, 2, 3}))
	corrupt.Data.Tensors[0].TensorContent = []byte("not snappy")
	insert(t, srv.Client, []*reverbpb.ChunkData{corrupt}, item("queue", 1, column(false, slice(corrupt, 0, 0, 3))))
	waitPending(t, srv, "queue", 1)   // one worker took the malformed item
	time.Sleep(50 * time.Millisecond) // and has failed on it by now
	keys := insertScalars(t, srv.Client, "queue", 7)

	samples, err := collect(testCtx(t), s, -1)
	if !errors.Is(err, client.ErrMalformedSample) {
		t.Fatalf("err %v, want ErrMalformedSample", err)
	}
	if len(samples) != 1 || samples[0].Info.Key != keys[0] {
		t.Errorf("got %d samples before the error, want the item inserted after it", len(samples))
	}
	if ti := tableInfo(t, c, "queue"); ti.Samples != 2 {
		t.Errorf("the queue gave out %d samples, want 2", ti.Samples)
	}
}

// TestSamplerTerminalErrorDrainIsBounded: a request in flight that the
// server does not serve (a queue that stays empty, no rate limiter
// timeout) does not hold back the terminal error for long, and is
// cancelled on the server.
func TestSamplerTerminalErrorDrainIsBounded(t *testing.T) {
	srv := startServer(t, server.QueueTable("queue", 10))
	c := dial(t, srv.Addr)
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 2, MaxInFlightSamplesPerWorker: 1})
	corrupt := chunk(t, client.Vector([]float32{1, 2, 3}))
	corrupt.Data.Tensors[0].TensorContent = []byte("not snappy")
	insert(t, srv.Client, []*reverbpb.ChunkData{corrupt}, item("queue", 1, column(false, slice(corrupt, 0, 0, 3))))
	start := time.Now()
	if _, err := s.Next(testCtx(t)); !errors.Is(err, client.ErrMalformedSample) {
		t.Fatalf("err %v, want ErrMalformedSample", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the error came after %v", d)
	}
	waitPending(t, srv, "queue", 0)
}

// TestSamplerTerminalErrorSlowConsumerLargeSamples: a worker's request
// for 4 large samples is served in 4 responses; while the worker waits
// for the slow consumer to make room, with the rest of its request sent by
// the server but not read, another worker times out at the rate limiter.
// The waiting worker reads the rest of its request once there is room,
// however long the consumer takes, and every sample reaches the consumer.
func TestSamplerTerminalErrorSlowConsumerLargeSamples(t *testing.T) {
	const n = 4
	srv := startServer(t, server.QueueTable("queue", n))
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	w, err := c.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1, ChunkLength: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range n {
		vals := make([]float32, 600_000) // 2.4 MB that Snappy cannot shrink: one sample per response
		r := rand.New(rand.NewPCG(uint64(i), 2))
		for j := range vals {
			vals[j] = r.Float32()
		}
		if err := w.Append(ctx, map[string]client.Tensor{"x": client.Vector(vals)}); err != nil {
			t.Fatal(err)
		}
		if err := w.CreateItem(ctx, "queue", 1, []client.TrajectoryColumn{w.History("x").At(-1).Squeeze()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s := newSampler(t, c, client.SamplerOptions{Table: "queue", NumWorkers: 2, MaxInFlightSamplesPerWorker: n,
		RateLimiterTimeout: 100 * time.Millisecond})
	time.Sleep(2500 * time.Millisecond) // longer than the sampler waits on requests in flight
	samples, err := collect(ctx, s, -1)
	if !errors.Is(err, client.ErrRateLimiterTimeout) {
		t.Fatalf("err %v, want ErrRateLimiterTimeout", err)
	}
	ti := tableInfo(t, c, "queue")
	if int64(len(samples)) != ti.Samples || len(samples) != n {
		t.Errorf("returned %d samples, the queue gave out %d; want %d", len(samples), ti.Samples, n)
	}
}
