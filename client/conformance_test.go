package client_test

// Conformance tests: reverie's Go client against a Reverb-compatible server.
//
// By default every TestConformance* function starts an in-process reverie
// server (server/servertest) with the tables of
// conformance/configs/go_client.yaml, so they run in every `go test ./...`.
// With REVERIE_CONFORMANCE_ADDR=host:port and
// REVERIE_CONFORMANCE_SERVER=reverie|reverb they run against that server
// instead, which must serve the same file's tables (Reverb's own server:
// conformance/reverb_launcher.py; scripts/conformance.sh runs both):
//
//	REVERIE_CONFORMANCE_ADDR=127.0.0.1:PORT REVERIE_CONFORMANCE_SERVER=reverb \
//	    go test ./client -run Conformance -count=1
//
// Against a shared server each test resets the tables it uses first. Every
// RPC the client makes is recorded; no test may call InitializeConnection
// (Reverb's in-process shortcut), which the Go client never uses.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// confConfigPath holds the tables of every conformance test, relative to
// the package directory (where go test runs).
const confConfigPath = "../conformance/configs/go_client.yaml"

// confBlocked is how long a call must stay blocked for a test to call it
// blocked.
const confBlocked = 500 * time.Millisecond

func confConfig(t *testing.T) server.Config {
	t.Helper()
	cfg, err := server.LoadConfigFile(confConfigPath)
	if err != nil {
		t.Fatalf("LoadConfigFile(%s): %v", confConfigPath, err)
	}
	return cfg
}

// confTable returns the configured table of that name.
func confTable(t *testing.T, name string) server.TableConfig {
	t.Helper()
	for _, tc := range confConfig(t).Tables {
		if tc.Name == name {
			return tc
		}
	}
	t.Fatalf("%s has no table %q", confConfigPath, name)
	return server.TableConfig{}
}

// confRPCs records the full method names a client called.
type confRPCs struct {
	mu      sync.Mutex
	methods []string
}

func (r *confRPCs) add(m string) {
	r.mu.Lock()
	r.methods = append(r.methods, m)
	r.mu.Unlock()
}

// confConnect returns a client of the server under test and its kind
// ("reverie" or "reverb"). The client, and the in-process server if any,
// are closed when the test ends, after checking that the client never
// called InitializeConnection.
func confConnect(t *testing.T) (*client.Client, string) {
	t.Helper()
	addr := os.Getenv("REVERIE_CONFORMANCE_ADDR")
	kind := os.Getenv("REVERIE_CONFORMANCE_SERVER")
	if addr == "" {
		if kind != "" && kind != "reverie" {
			t.Fatalf("REVERIE_CONFORMANCE_SERVER=%q needs REVERIE_CONFORMANCE_ADDR", kind)
		}
		addr, kind = servertest.Start(t, confConfig(t)).Addr, "reverie"
	} else if kind != "reverie" && kind != "reverb" {
		t.Fatalf("REVERIE_CONFORMANCE_SERVER must be reverie or reverb, got %q", kind)
	}
	rpcs := &confRPCs{}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		rpcs.add(method)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		rpcs.add(method)
		return streamer(ctx, desc, cc, method, opts...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.WithDialOptions(
		grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)))
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	t.Cleanup(func() {
		c.Close()
		rpcs.mu.Lock()
		defer rpcs.mu.Unlock()
		for _, m := range rpcs.methods {
			if strings.HasSuffix(m, "/InitializeConnection") {
				t.Errorf("the client called %s", m)
			}
		}
	})
	return c, kind
}

func confCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func confReset(t *testing.T, c *client.Client, tables ...string) {
	t.Helper()
	for _, table := range tables {
		if err := c.Reset(confCtx(t), table); err != nil {
			t.Fatalf("Reset(%s): %v", table, err)
		}
	}
}

func confInfo(t *testing.T, c *client.Client, table string) client.TableInfo {
	t.Helper()
	info, err := c.ServerInfo(confCtx(t))
	if err != nil {
		t.Fatalf("ServerInfo: %v", err)
	}
	ti, ok := info[table]
	if !ok {
		t.Fatalf("ServerInfo has no table %q", table)
	}
	return ti
}

func confWriter(t *testing.T, c *client.Client, opts client.WriterOptions) *client.TrajectoryWriter {
	t.Helper()
	w, err := c.NewTrajectoryWriter(confCtx(t), opts)
	if err != nil {
		t.Fatalf("NewTrajectoryWriter: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// confSampler samples table one sample per request; timeout 0 waits forever.
func confSampler(t *testing.T, c *client.Client, table string, maxSamples int64, timeout time.Duration) *client.Sampler {
	t.Helper()
	s, err := c.NewSampler(client.SamplerOptions{
		Table: table, MaxSamples: maxSamples, MaxInFlightSamplesPerWorker: 1,
		RateLimiterTimeout: timeout,
	})
	if err != nil {
		t.Fatalf("NewSampler: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// confSample returns n samples of table, failing the test if they do not
// come within 10 s of the rate limiter.
func confSample(t *testing.T, c *client.Client, table string, n int) []client.Sample {
	t.Helper()
	s := confSampler(t, c, table, int64(n), 10*time.Second)
	defer s.Close()
	var out []client.Sample
	for smp, err := range s.Samples(confCtx(t)) {
		if err != nil {
			t.Fatalf("sampling %s: %v after %d of %d samples", table, err, len(out), n)
		}
		out = append(out, smp)
	}
	if len(out) != n {
		t.Fatalf("sampling %s: got %d samples, want %d", table, len(out), n)
	}
	return out
}

// confInsertInt64 writes one item per value, a squeezed int64 scalar, with a
// TrajectoryWriter and waits for the server's confirmations. (Tests of
// other features do not use Client.Insert: see TestConformanceInsert.)
func confInsertInt64(t *testing.T, c *client.Client, table string, priority float64, values ...int64) {
	t.Helper()
	ctx := confCtx(t)
	w, err := c.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1})
	if err != nil {
		t.Fatalf("NewTrajectoryWriter: %v", err)
	}
	defer w.Close()
	for _, v := range values {
		if err := w.Append(ctx, map[string]client.Tensor{"x": client.Scalar(v)}); err != nil {
			t.Fatalf("Append: %v", err)
		}
		if err := w.CreateItem(ctx, table, priority, []client.TrajectoryColumn{w.History("x").At(-1).Squeeze()}); err != nil {
			t.Fatalf("CreateItem: %v", err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("writing %v into %s: Flush: %v", values, table, err)
	}
}

func confInt64(t *testing.T, tn client.Tensor) int64 {
	t.Helper()
	v, err := client.Values[int64](tn)
	if err != nil || len(v) == 0 {
		t.Fatalf("column %v: %v", tn.Shape, err)
	}
	return v[0]
}

// confValues is the first element of column 0 of every sample.
func confValues(t *testing.T, samples []client.Sample) []int64 {
	t.Helper()
	var out []int64
	for _, s := range samples {
		out = append(out, confInt64(t, s.Columns[0]))
	}
	return out
}

// confOK returns tn, panicking on a constructor error (the inputs are
// constants of the tests).
func confOK(tn client.Tensor, err error) client.Tensor {
	if err != nil {
		panic(err)
	}
	return tn
}

func confClose(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// --- writer and sampler: columns, dtypes, chunks ---------------------------------

// confStep is step i of a column of every dtype the client encodes.
func confStep(t *testing.T, i int) map[string]client.Tensor {
	f := float64(i)
	return map[string]client.Tensor{
		"bool":  confOK(client.FromBools([]bool{i%2 == 0, true, false}, 3)),
		"bf16":  confOK(client.FromBFloat16Bits([]uint16{0x3f80 + uint16(i), 0xc000}, 2)),
		"c128":  client.Vector([]complex128{complex(f, -f), complex(1e300, 0)}),
		"c64":   client.Scalar(complex64(complex(f, 0.5))),
		"f16":   confOK(client.FromFloat16Bits([]uint16{0x3c00 + uint16(i), 0x7c00}, 2)),
		"f32":   confOK(client.FromSlice([]float32{float32(f), -float32(f), 0.5, float32(math.Inf(1)), 1e-38, 3}, 2, 3)),
		"f64":   client.Scalar(f * 1.5),
		"i16":   client.Vector([]int16{math.MinInt16, int16(i), math.MaxInt16}),
		"i32":   client.Vector([]int32{math.MinInt32, int32(-i), math.MaxInt32}),
		"i64":   client.Scalar(int64(math.MaxInt64 - i)),
		"i8":    client.Vector([]int8{math.MinInt8, int8(i), math.MaxInt8}),
		"str":   confOK(client.FromStrings([]string{fmt.Sprintf("step %d", i), strings.Repeat("x", 1000*i), ""}, 3)),
		"u16":   client.Vector([]uint16{0, uint16(i), math.MaxUint16}),
		"u32":   client.Vector([]uint32{0, uint32(i), math.MaxUint32}),
		"u64":   client.Vector([]uint64{0, uint64(i), math.MaxUint64}),
		"u8":    confOK(client.FromSlice([]uint8{0, uint8(i), math.MaxUint8, 7}, 2, 2)),
		"bytes": confOK(client.FromByteStrings([][]byte{{0, 0xff, byte(i)}}, 1)),
	}
}

func confSortedNames(m map[string]client.Tensor) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// confStack stacks column name of steps [from, to).
func confStack(t *testing.T, steps []map[string]client.Tensor, name string, idx ...int) client.Tensor {
	t.Helper()
	rows := make([]client.Tensor, len(idx))
	for i, j := range idx {
		rows[i] = steps[j][name]
	}
	s, err := client.Stack(rows)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformanceWriterDTypesAcrossChunks(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "fifo_items")
	ctx := confCtx(t)
	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 6, ChunkLength: 2})
	var steps []map[string]client.Tensor
	names := confSortedNames(confStep(t, 0))
	for i := range 6 {
		steps = append(steps, confStep(t, i))
		if err := w.Append(ctx, steps[i]); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		if i == 4 {
			// Steps 0..4: chunks [0,1] [2,3] [4,5] of every column, the
			// last one still open.
			var cols []client.TrajectoryColumn
			for _, n := range names {
				cols = append(cols, w.History(n).Last(5))
			}
			if err := w.CreateItem(ctx, "fifo_items", 1, cols); err != nil {
				t.Fatalf("CreateItem: %v", err)
			}
		}
	}
	// Steps 1..5 and a single step from the middle of a chunk.
	var cols []client.TrajectoryColumn
	for _, n := range names {
		cols = append(cols, w.History(n).Slice(1, 6), w.History(n).At(2))
	}
	if err := w.CreateItem(ctx, "fifo_items", 2, cols); err != nil {
		t.Fatalf("CreateItem: %v", err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	samples := confSample(t, c, "fifo_items", 2)
	first, second := samples[0], samples[1]
	if first.Info.Priority != 1 || second.Info.Priority != 2 {
		t.Fatalf("priorities %v, %v; want FIFO order 1, 2", first.Info.Priority, second.Info.Priority)
	}
	if len(first.Columns) != len(names) || len(second.Columns) != 2*len(names) {
		t.Fatalf("got %d and %d columns, want %d and %d", len(first.Columns), len(second.Columns), len(names), 2*len(names))
	}
	for i, n := range names {
		if want := confStack(t, steps, n, 0, 1, 2, 3, 4); !first.Columns[i].Equal(want) {
			t.Errorf("item 1, column %s: got %+v, want %+v", n, first.Columns[i], want)
		}
		if want := confStack(t, steps, n, 1, 2, 3, 4, 5); !second.Columns[2*i].Equal(want) {
			t.Errorf("item 2, column %s: got %+v, want %+v", n, second.Columns[2*i], want)
		}
		if want := confStack(t, steps, n, 2); !second.Columns[2*i+1].Equal(want) {
			t.Errorf("item 2, column %s[2]: got %+v, want %+v", n, second.Columns[2*i+1], want)
		}
	}
}

func TestConformanceWriterLargeStep(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "fifo_items")
	ctx := confCtx(t)
	// 12 MB of incompressible floats: more than gRPC's 4 MiB default.
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, 3_000_000)
	for i := range vals {
		vals[i] = rng.Float32()
	}
	big := confOK(client.FromSlice(vals, 3, 1_000_000))
	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 1})
	if err := w.Append(ctx, map[string]client.Tensor{"big": big}); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateItem(ctx, "fifo_items", 1, []client.TrajectoryColumn{w.History("big").At(-1).Squeeze()}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	got := confSample(t, c, "fifo_items", 1)[0]
	if !got.Columns[0].Equal(big) {
		t.Fatalf("the 12 MB column came back different (shape %v)", got.Columns[0].Shape)
	}
}

func TestConformanceWriterSqueeze(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "fifo_items")
	ctx := confCtx(t)
	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 2})
	for i := range 2 {
		m := confOK(client.FromSlice(slices.Repeat([]float64{float64(i)}, 6), 2, 3))
		if err := w.Append(ctx, map[string]client.Tensor{"m": m, "s": client.Scalar(int16(i))}); err != nil {
			t.Fatal(err)
		}
	}
	err := w.CreateItem(ctx, "fifo_items", 1, []client.TrajectoryColumn{
		w.History("m").At(-1).Squeeze(), w.History("m").Last(1),
		w.History("s").At(0).Squeeze(), w.History("s").Last(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	cols := confSample(t, c, "fifo_items", 1)[0].Columns
	wantShapes := [][]int64{{2, 3}, {1, 2, 3}, {}, {2}}
	for i, want := range wantShapes {
		if !slices.Equal(cols[i].Shape, want) {
			t.Errorf("column %d: shape %v, want %v", i, cols[i].Shape, want)
		}
	}
	if v, _ := client.Values[int16](cols[3]); !slices.Equal(v, []int16{0, 1}) {
		t.Errorf("column 3: %v, want [0 1]", v)
	}
	if v, _ := client.Values[int16](cols[2]); !slices.Equal(v, []int16{0}) {
		t.Errorf("column 2: %v, want [0]", v)
	}
}

func TestConformanceWriterOverlappingItems(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "fifo_items")
	ctx := confCtx(t)
	// Automatic chunk length: chunks grow from 1 to the item length 3.
	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 3})
	for i := range 10 {
		if err := w.Append(ctx, map[string]client.Tensor{"v": client.Vector([]int32{int32(i), int32(-i)})}); err != nil {
			t.Fatal(err)
		}
		if i >= 2 {
			if err := w.CreateItem(ctx, "fifo_items", float64(i), []client.TrajectoryColumn{w.History("v").Last(3)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i, s := range confSample(t, c, "fifo_items", 8) {
		got, _ := client.Values[int32](s.Columns[0])
		j := int32(i)
		if want := []int32{j, -j, j + 1, -j - 1, j + 2, -j - 2}; !slices.Equal(got, want) || !slices.Equal(s.Columns[0].Shape, []int64{3, 2}) {
			t.Errorf("item %d: %v %v, want [3 2] %v", i, s.Columns[0].Shape, got, want)
		}
		if s.Info.Priority != float64(i+2) {
			t.Errorf("item %d: priority %v, want %d", i, s.Info.Priority, i+2)
		}
	}
}

func TestConformanceWriterEndEpisode(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "fifo_items")
	ctx := confCtx(t)
	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 2})
	for ep := range 2 {
		for i := range 3 {
			if err := w.Append(ctx, map[string]client.Tensor{"x": client.Scalar(int64(10*ep + i))}); err != nil {
				t.Fatal(err)
			}
			if err := w.CreateItem(ctx, "fifo_items", 1, []client.TrajectoryColumn{w.History("x").Last(1)}); err != nil {
				t.Fatal(err)
			}
		}
		if w.EpisodeSteps() != 3 {
			t.Errorf("EpisodeSteps %d, want 3", w.EpisodeSteps())
		}
		if err := w.EndEpisode(ctx, true); err != nil {
			t.Fatalf("EndEpisode: %v", err)
		}
		if w.EpisodeSteps() != 0 || w.History("x").Len() != 0 {
			t.Errorf("after EndEpisode: %d steps, history %d", w.EpisodeSteps(), w.History("x").Len())
		}
	}
	ti := confInfo(t, c, "fifo_items")
	if ti.CurrentSize != 6 || ti.NumEpisodes != 2 {
		t.Errorf("size %d, episodes %d; want 6, 2", ti.CurrentSize, ti.NumEpisodes)
	}
	if got := confValues(t, confSample(t, c, "fifo_items", 6)); !slices.Equal(got, []int64{0, 1, 2, 10, 11, 12}) {
		t.Errorf("values %v", got)
	}
	// The queue deleted every item: no episode is referenced any more.
	if ti := confInfo(t, c, "fifo_items"); ti.NumEpisodes != 0 || ti.NumDeletedEpisodes != 2 {
		t.Errorf("after sampling: %d episodes, %d deleted; want 0, 2", ti.NumEpisodes, ti.NumDeletedEpisodes)
	}
}

// --- Insert, probabilities, mutate_priorities, reset -----------------------------

// TestConformanceInsert checks Client.Insert: each call returns once the
// server confirmed its items.
func TestConformanceInsert(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "prio", "fifo_items")
	ctx := confCtx(t)
	const n = 10
	for i := range n {
		step := []client.Tensor{client.Scalar(int64(i)), client.Vector([]float32{float32(i), 0.5})}
		if err := c.Insert(ctx, step, map[string]float64{"fifo_items": 1}); err != nil {
			// Whether the item went in anyway (Reverb's stream can end
			// before it confirms an item it then inserts).
			time.Sleep(100 * time.Millisecond)
			t.Fatalf("Insert %d of %d: %v (the table now holds %d items)", i+1, n, err, confInfo(t, c, "fifo_items").CurrentSize)
		}
	}
	if err := c.Insert(ctx, []client.Tensor{client.Vector([]int64{0, 1, 2, 3})}, map[string]float64{"prio": 4, "fifo_items": 2}); err != nil {
		t.Fatalf("Insert into two tables: %v", err)
	}
	for i, s := range confSample(t, c, "fifo_items", n) {
		f, _ := client.Values[float32](s.Columns[1])
		if v := confInt64(t, s.Columns[0]); v != int64(i) || len(s.Columns[0].Shape) != 0 || !slices.Equal(f, []float32{float32(i), 0.5}) {
			t.Errorf("item %d: %d %v (shape %v), want %d [%d 0.5] (Insert squeezes)", i, v, f, s.Columns[0].Shape, i, i)
		}
	}
	p := confSample(t, c, "prio", 1)[0]
	q := confSample(t, c, "fifo_items", 1)[0]
	if p.Info.Key == q.Info.Key || p.Info.Priority != 4 || q.Info.Priority != 2 {
		t.Errorf("infos %+v %+v", p.Info, q.Info)
	}
	for _, s := range []client.Sample{p, q} {
		if v, _ := client.Values[int64](s.Columns[0]); !slices.Equal(v, []int64{0, 1, 2, 3}) {
			t.Errorf("%s: %v", s.Info.Table, v)
		}
	}
}

func TestConformanceSamplePrioritized(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "prio")
	ctx := confCtx(t)
	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 1})
	for _, p := range []float64{1, 2, 3} {
		step := map[string]client.Tensor{"obs": client.Vector([]float32{float32(p), float32(p)}), "n": client.Scalar(int32(p))}
		if err := w.Append(ctx, step); err != nil {
			t.Fatal(err)
		}
		err := w.CreateItem(ctx, "prio", p, []client.TrajectoryColumn{w.History("obs").At(-1).Squeeze(), w.History("n").Last(1)})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	counts := map[uint64]int32{}
	for _, s := range confSample(t, c, "prio", 30) {
		in := s.Info
		counts[in.Key]++
		if !confClose(in.Probability, in.Priority/6) || in.TableSize != 3 || in.Table != "prio" {
			t.Errorf("info %+v: want probability priority/6, table size 3", in)
		}
		if in.TimesSampled != counts[in.Key] {
			t.Errorf("times_sampled %d, want %d", in.TimesSampled, counts[in.Key])
		}
		if in.InsertedAt.IsZero() {
			t.Errorf("inserted_at not set")
		}
		obs, _ := client.Values[float32](s.Columns[0])
		n, _ := client.Values[int32](s.Columns[1])
		if !slices.Equal(obs, []float32{float32(in.Priority), float32(in.Priority)}) || !slices.Equal(n, []int32{int32(in.Priority)}) {
			t.Errorf("columns %v %v for priority %v", obs, n, in.Priority)
		}
		if !slices.Equal(s.Columns[0].Shape, []int64{2}) || !slices.Equal(s.Columns[1].Shape, []int64{1}) {
			t.Errorf("shapes %v %v, want [2] and [1]", s.Columns[0].Shape, s.Columns[1].Shape)
		}
	}
	if len(counts) < 2 {
		t.Errorf("30 draws saw keys %v", counts)
	}
	if ti := confInfo(t, c, "prio"); ti.NumUniqueSamples != int64(len(counts)) || ti.Samples != 30 || ti.Inserts != 3 {
		t.Errorf("info: unique samples %d (want %d), samples %d (30), inserts %d (3)", ti.NumUniqueSamples, len(counts), ti.Samples, ti.Inserts)
	}
}

// confKeys samples table until it knows the key of each of n int64 values.
func confKeys(t *testing.T, c *client.Client, table string, n int) map[int64]uint64 {
	t.Helper()
	s := confSampler(t, c, table, 500, 10*time.Second)
	defer s.Close()
	keys := map[int64]uint64{}
	for smp, err := range s.Samples(confCtx(t)) {
		if err != nil {
			t.Fatalf("sampling: %v", err)
		}
		keys[confInt64(t, smp.Columns[0])] = smp.Info.Key
		if len(keys) == n {
			break
		}
	}
	if len(keys) != n {
		t.Fatalf("found keys %v, want %d", keys, n)
	}
	return keys
}

func TestConformanceMutatePriorities(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "prio")
	confInsertInt64(t, c, "prio", 1, 0, 1, 2, 3)
	keys := confKeys(t, c, "prio", 4)
	ctx := confCtx(t)
	if err := c.MutatePriorities(ctx, "prio", map[uint64]float64{keys[0]: 3}, []uint64{keys[3]}); err != nil {
		t.Fatalf("MutatePriorities: %v", err)
	}
	if ti := confInfo(t, c, "prio"); ti.CurrentSize != 3 {
		t.Fatalf("size %d after a delete, want 3", ti.CurrentSize)
	}
	for _, s := range confSample(t, c, "prio", 30) {
		v := confInt64(t, s.Columns[0])
		want := map[int64]float64{0: 3, 1: 1, 2: 1}[v]
		if v == 3 || s.Info.Priority != want || !confClose(s.Info.Probability, want/5) {
			t.Errorf("value %d: priority %v probability %v, want %v and %v", v, s.Info.Priority, s.Info.Probability, want, want/5)
		}
	}
	// Deletes come first, so the update of a deleted key is ignored, as are
	// unknown keys.
	err := c.MutatePriorities(ctx, "prio", map[uint64]float64{keys[1]: 7, 12345: 1}, []uint64{keys[1], 54321})
	if err != nil {
		t.Fatalf("MutatePriorities: %v", err)
	}
	if ti := confInfo(t, c, "prio"); ti.CurrentSize != 2 {
		t.Fatalf("size %d, want 2", ti.CurrentSize)
	}
	for _, s := range confSample(t, c, "prio", 10) {
		if v := confInt64(t, s.Columns[0]); v != 0 && v != 2 {
			t.Errorf("sampled deleted value %d", v)
		}
	}
}

// TestConformanceMutatePrioritiesInvalid is departure 8 of
// docs/compatibility.md: an update to a negative priority in a Prioritized
// table fails with INVALID_ARGUMENT on both servers. reverie changes
// nothing; Reverb 0.14.0 stores the bad priority on the item, which samples
// then report, while its selector keeps the old weight. (Client's
// MutatePriorities takes a map, so the order of several updates in one
// request, and with it which of them Reverb applies, is not fixed: the
// request has one update.)
func TestConformanceMutatePrioritiesInvalid(t *testing.T) {
	c, kind := confConnect(t)
	confReset(t, c, "prio_invalid")
	confInsertInt64(t, c, "prio_invalid", 1, 0, 1)
	keys := confKeys(t, c, "prio_invalid", 2)
	err := c.MutatePriorities(confCtx(t), "prio_invalid", map[uint64]float64{keys[1]: -1}, nil)
	if !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("MutatePriorities with a negative priority: %v, want ErrInvalidArgument", err)
	}
	want := map[int64]float64{0: 1, 1: 1} // priorities; probabilities stay 1/2
	if kind == "reverb" {
		want[1] = -1
	}
	for _, s := range confSample(t, c, "prio_invalid", 20) {
		v := confInt64(t, s.Columns[0])
		if s.Info.Priority != want[v] || !confClose(s.Info.Probability, 0.5) {
			t.Errorf("%s server, value %d: priority %v probability %v, want %v and 0.5", kind, v, s.Info.Priority, s.Info.Probability, want[v])
		}
	}
}

func TestConformanceReset(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "prio", "fifo_items")
	confInsertInt64(t, c, "prio", 1, 1, 2)
	confInsertInt64(t, c, "fifo_items", 1, 9)
	confSample(t, c, "prio", 2)
	confReset(t, c, "prio")
	ti := confInfo(t, c, "prio")
	if ti.CurrentSize != 0 || ti.Inserts != 0 || ti.Samples != 0 || ti.NumEpisodes != 0 || ti.NumUniqueSamples != 0 {
		t.Errorf("after reset: %+v", ti)
	}
	if other := confInfo(t, c, "fifo_items"); other.CurrentSize != 1 {
		t.Errorf("reset of prio changed fifo_items: size %d", other.CurrentSize)
	}
	confInsertInt64(t, c, "prio", 1, 5)
	if s := confSample(t, c, "prio", 1)[0]; confInt64(t, s.Columns[0]) != 5 || s.Info.TableSize != 1 || s.Info.TimesSampled != 1 {
		t.Errorf("sample after reset: %+v", s.Info)
	}
}

// --- ServerInfo --------------------------------------------------------------------

func TestConformanceServerInfo(t *testing.T) {
	c, _ := confConnect(t)
	info, err := c.ServerInfo(confCtx(t))
	if err != nil {
		t.Fatalf("ServerInfo: %v", err)
	}
	var names, want []string
	for n := range info {
		names = append(names, n)
	}
	for _, tc := range confConfig(t).Tables {
		want = append(want, tc.Name)
	}
	sort.Strings(names)
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tables %v, want %v", names, want)
	}

	p := info["prio"]
	if p.Name != "prio" || p.MaxSize != 1000 || p.MaxTimesSampled != 0 || p.Signature != nil {
		t.Errorf("prio: %+v", p)
	}
	if p.Sampler.GetPrioritized().GetPriorityExponent() != 1 || p.Sampler.GetIsDeterministic() {
		t.Errorf("prio sampler %v", p.Sampler)
	}
	if !p.Remover.GetFifo() || !p.Remover.GetIsDeterministic() {
		t.Errorf("prio remover %v", p.Remover)
	}
	rl := p.RateLimiter
	if rl.GetSamplesPerInsert() != 1 || rl.GetMinSizeToSample() != 1 || rl.GetMinDiff() != -math.MaxFloat64 || rl.GetMaxDiff() != math.MaxFloat64 {
		t.Errorf("prio rate limiter %v", rl)
	}

	q := info["queue_block"]
	if q.MaxSize != 2 || q.MaxTimesSampled != 1 || !q.Sampler.GetFifo() || !q.Remover.GetFifo() ||
		q.RateLimiter.GetMinDiff() != 0 || q.RateLimiter.GetMaxDiff() != 2 {
		t.Errorf("queue_block: %+v", q)
	}
	r := info["ratio"].RateLimiter
	if r.GetSamplesPerInsert() != 2 || r.GetMinSizeToSample() != 1 || r.GetMinDiff() != 0 || r.GetMaxDiff() != 4 {
		t.Errorf("ratio rate limiter %v", r)
	}
	st := info["nested_sig"]
	if !st.Sampler.GetLifo() || !st.Remover.GetLifo() || st.MaxTimesSampled != 1 {
		t.Errorf("nested_sig (a stack): %+v", st)
	}

	s := info["sig"]
	if s.MaxTimesSampled != 5 || s.RateLimiter.GetMinSizeToSample() != 2 {
		t.Errorf("sig: %+v", s)
	}
	for _, name := range []string{"sig", "nested_sig"} {
		want := confTable(t, name).Signature
		if got := info[name].Signature; !proto.Equal(got, want) {
			t.Errorf("%s signature:\n got %v\nwant %v", name, got, want)
		}
	}
	// The nest's shape, spelled out: a dict {a: {b, c}, x: [spec, (spec, spec)]}.
	fields := info["nested_sig"].Signature.GetDictValue().GetFields()
	x := fields["x"].GetListValue().GetValues()
	if len(fields) != 2 || len(fields["a"].GetDictValue().GetFields()) != 2 || len(x) != 2 ||
		len(x[1].GetTupleValue().GetValues()) != 2 {
		t.Errorf("nested_sig signature nest: %v", info["nested_sig"].Signature)
	}
	b := fields["a"].GetDictValue().GetFields()["b"].GetTensorSpecValue()
	if b.GetDtype() != tensorflowpb.DataType_DT_FLOAT || len(b.GetShape().GetDim()) != 2 {
		t.Errorf("nested_sig a.b: %v", b)
	}
	if !x[1].GetTupleValue().GetValues()[1].GetTensorSpecValue().GetShape().GetUnknownRank() {
		t.Errorf("nested_sig x[1][1] should have unknown rank: %v", x[1])
	}
}

// --- Queue blocking, flush timeouts, rate limiter timeouts ---------------------------

func TestConformanceQueueBlockingAndFlushTimeout(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "queue_block")
	ctx := confCtx(t)
	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 1})
	for i := range 3 {
		if err := w.Append(ctx, map[string]client.Tensor{"x": client.Scalar(int64(i))}); err != nil {
			t.Fatal(err)
		}
		if err := w.CreateItem(ctx, "queue_block", 1, []client.TrajectoryColumn{w.History("x").At(-1).Squeeze()}); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := w.Flush(ctx); err != nil { // Queue(2) is full
				t.Fatalf("Flush: %v", err)
			}
		}
	}
	// The third item waits for a sample.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	err := w.Flush(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush into a full queue: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Flush took %v to time out", d)
	}
	if ti := confInfo(t, c, "queue_block"); ti.CurrentSize != 2 {
		t.Fatalf("size %d, want 2", ti.CurrentSize)
	}
	if got := confValues(t, confSample(t, c, "queue_block", 1)); !slices.Equal(got, []int64{0}) {
		t.Fatalf("first sample %v, want [0]", got)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after a sample made room: %v", err)
	}
	if got := confValues(t, confSample(t, c, "queue_block", 2)); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("samples %v, want [1 2]", got)
	}

	// An empty queue: a sample waits for an insert.
	s := confSampler(t, c, "queue_block", 1, client.WaitForever)
	done := make(chan client.Sample, 1)
	errc := make(chan error, 1)
	go func() {
		smp, err := s.Next(ctx)
		if err != nil {
			errc <- err
			return
		}
		done <- smp
	}()
	select {
	case smp := <-done:
		t.Fatalf("sampled %v from an empty queue", smp.Info)
	case err := <-errc:
		t.Fatalf("Next on an empty queue: %v", err)
	case <-time.After(confBlocked):
	}
	confInsertInt64(t, c, "queue_block", 1, 42)
	select {
	case smp := <-done:
		if v := confInt64(t, smp.Columns[0]); v != 42 {
			t.Errorf("sampled %d, want 42", v)
		}
	case err := <-errc:
		t.Fatalf("Next: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the sample stayed blocked after an insert")
	}
}

func TestConformanceRateLimiterTimeout(t *testing.T) {
	c, _ := confConnect(t)
	confReset(t, c, "empty", "ratio")
	// An empty table: the first sample times out.
	s := confSampler(t, c, "empty", 0, 200*time.Millisecond)
	start := time.Now()
	_, err := s.Next(confCtx(t))
	if !errors.Is(err, client.ErrRateLimiterTimeout) {
		t.Fatalf("Next on an empty table: %v, want ErrRateLimiterTimeout", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 10*time.Second {
		t.Errorf("timed out after %v, want about 200ms", d)
	}

	// SampleToInsertRatio(2, 1, 2): one insert allows two samples, then the
	// third waits for the rate limiter and times out.
	confInsertInt64(t, c, "ratio", 1, 7)
	s = confSampler(t, c, "ratio", 0, 300*time.Millisecond)
	var got []int64
	for smp, err := range s.Samples(confCtx(t)) {
		if err != nil {
			if !errors.Is(err, client.ErrRateLimiterTimeout) {
				t.Fatalf("after %d samples: %v, want ErrRateLimiterTimeout", len(got), err)
			}
			break
		}
		got = append(got, confInt64(t, smp.Columns[0]))
	}
	if !slices.Equal(got, []int64{7, 7}) {
		t.Errorf("samples %v, want [7 7]", got)
	}
	if ti := confInfo(t, c, "ratio"); ti.Samples != 2 || ti.Inserts != 1 {
		t.Errorf("ratio: %d samples, %d inserts; want 2, 1", ti.Samples, ti.Inserts)
	}
}

func TestConformanceUnknownTable(t *testing.T) {
	c, _ := confConnect(t)
	ctx := confCtx(t)
	const table = "no_such_table"
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrTableNotFound) || !strings.Contains(err.Error(), table) {
			t.Errorf("%s: %v, want ErrTableNotFound naming %s", what, err, table)
		}
	}
	s := confSampler(t, c, table, 1, 5*time.Second)
	_, err := s.Next(ctx)
	check("Sampler.Next", err)
	check("MutatePriorities", c.MutatePriorities(ctx, table, map[uint64]float64{1: 1}, nil))
	check("Reset", c.Reset(ctx, table))
	check("Insert", c.Insert(ctx, []client.Tensor{client.Scalar(int64(1))}, map[string]float64{table: 1}))

	w := confWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 1})
	if err := w.Append(ctx, map[string]client.Tensor{"x": client.Scalar(int64(1))}); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateItem(ctx, table, 1, []client.TrajectoryColumn{w.History("x").Last(1)}); err != nil {
		t.Fatal(err)
	}
	check("TrajectoryWriter.Flush", w.Flush(ctx))
}
