package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

// TestWriterRequestsMatchEncodeChunk records what a writer sends for steps
// with partial columns (sparse chunks), delta-encoded integer columns,
// strings, scalars and chunks closed early by Flush, and checks every chunk
// against what EncodeChunk builds from the same rows (the writer's encoding
// before it encoded chunks by hand), every item against the steps it
// references, and keep_chunk_keys against the chunks later requests use.
func TestWriterRequestsMatchEncodeChunk(t *testing.T) {
	for _, delta := range []bool{false, true} {
		for _, chunkLength := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("delta=%v/chunk=%d", delta, chunkLength), func(t *testing.T) {
				testWriterRequests(t, delta, chunkLength)
			})
		}
	}
}

func testWriterRequests(t *testing.T, delta bool, chunkLength int) {
	s, _ := wtStart(t, server.QueueTable("q", 1000))
	var rec wtRecorder
	c := wtDial(t, s.Addr, client.WithDialOptions(grpc.WithStreamInterceptor(rec.interceptor)))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 4, ChunkLength: chunkLength, DeltaEncode: delta})

	ints := func(i int) client.Tensor {
		v, err := client.FromSlice([]int32{int32(i), int32(i * i), -int32(i), 7}, 2, 2)
		if err != nil {
			panic(err)
		}
		return v
	}
	// steps[i][name] is the value of column name at step i, absent when
	// the step omits the column.
	cols := map[string]func(int) client.Tensor{"obs": wtObs, "act": wtAct, "name": wtName, "ints": ints}
	var steps []map[string]client.Tensor
	for i := range 30 {
		step := map[string]client.Tensor{}
		for name, f := range cols {
			if (name == "ints" && i%3 == 1) || (name == "name" && i%5 == 2) {
				continue
			}
			step[name] = f(i)
		}
		steps = append(steps, step)
		if err := w.Append(ctx, step); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		item := []client.TrajectoryColumn{w.History("obs").Last(min(i+1, 2)), w.History("act").At(-1).Squeeze()}
		if _, ok := step["ints"]; ok {
			item = append(item, w.History("ints").At(-1))
		}
		if err := w.CreateItem(ctx, "q", float64(i), item); err != nil {
			t.Fatalf("CreateItem %d: %v", i, err)
		}
		if i%7 == 6 {
			if err := w.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.streams) != 1 {
		t.Fatalf("%d insert streams, want 1", len(rec.streams))
	}
	chunks := map[uint64]*reverbpb.ChunkData{}
	var held map[uint64]bool // chunks the server holds after the previous request
	items := 0
	for r, req := range rec.streams[0] {
		for _, ch := range req.GetChunks() {
			if chunks[ch.GetChunkKey()] != nil {
				t.Errorf("request %d: chunk %d sent twice", r, ch.GetChunkKey())
			}
			chunks[ch.GetChunkKey()] = ch
		}
		available := map[uint64]bool{}
		for k := range held {
			available[k] = true
		}
		for _, ch := range req.GetChunks() {
			available[ch.GetChunkKey()] = true
		}
		for _, it := range req.GetItems() {
			i := int(it.GetPriority())
			if i != items {
				t.Fatalf("request %d: item for step %d, want step %d", r, i, items)
			}
			items++
			for _, col := range it.GetFlatTrajectory().GetColumns() {
				for _, sl := range col.GetChunkSlices() {
					if !available[sl.GetChunkKey()] {
						t.Errorf("request %d, item %d: chunk %d is neither in the request nor kept", r, i, sl.GetChunkKey())
					}
				}
			}
			// The item's columns, from the chunks sent so far.
			got := wtDecode(t, &wtSample{item: it, chunks: chunks})
			want := []client.Tensor{wtStack(t, wtRange(max(i-1, 0), i+1, wtObs)), wtAct(i)}
			if _, ok := steps[i]["ints"]; ok {
				want = append(want, wtStack(t, []client.Tensor{ints(i)}))
			}
			if len(got) != len(want) {
				t.Fatalf("item %d: %d columns, want %d", i, len(got), len(want))
			}
			for j := range want {
				wtCheckColumn(t, fmt.Sprintf("item %d column %d", i, j), got[j], want[j])
			}
		}
		held = map[uint64]bool{}
		for _, k := range req.GetKeepChunkKeys() {
			if !available[k] {
				t.Errorf("request %d keeps chunk %d, which the server does not hold", r, k)
			}
			held[k] = true
		}
	}
	if items != len(steps) {
		t.Errorf("%d items sent, want %d", items, len(steps))
	}

	// Every chunk is what EncodeChunk makes of its column's rows.
	for key, ch := range chunks {
		sr := ch.GetSequenceRange()
		ts, err := client.DecodeChunk(ch)
		if err != nil || len(ts) != 1 {
			t.Fatalf("chunk %d: %d tensors, %v", key, len(ts), err)
		}
		var name string
		for n, f := range cols {
			if v := f(int(sr.GetStart())); ts[0].DType == v.DType && len(ts[0].Shape) == len(v.Shape)+1 {
				name = n
			}
		}
		var rows []client.Tensor
		for i := sr.GetStart(); i <= sr.GetEnd(); i++ {
			if v, ok := steps[i][name]; ok {
				rows = append(rows, v)
			}
		}
		sparse := len(rows) != int(sr.GetEnd()-sr.GetStart())+1
		want, err := client.EncodeChunk(key, &reverbpb.SequenceRange{
			EpisodeId: sr.GetEpisodeId(), Start: sr.GetStart(), End: sr.GetEnd(), Sparse: sparse,
		}, []client.Tensor{wtStack(t, rows)}, delta)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(ch, want) {
			t.Errorf("chunk %d of column %q, steps [%d, %d]:\ngot  %v\nwant %v", key, name, sr.GetStart(), sr.GetEnd(), ch, want)
		}
	}
}

// TestWriterAppendCopies overwrites the caller's tensors right after every
// Append and checks that the server still gets the values appended, both
// for chunks encoded within Append and for rows that wait in an open chunk.
func TestWriterAppendCopies(t *testing.T) {
	for _, chunkLength := range []int{1, 3} {
		t.Run(fmt.Sprintf("chunk=%d", chunkLength), func(t *testing.T) {
			s, c := wtStart(t, server.QueueTable("q", 100))
			ctx := wtCtx(t)
			w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 3, ChunkLength: chunkLength})
			obs, name := wtObs(0), wtName(0)
			const n = 7
			for i := range n {
				copy(obs.Data, wtObs(i).Data)
				name.Strings[0] = append(name.Strings[0][:0], wtName(i).Strings[0]...)
				if err := w.Append(ctx, map[string]client.Tensor{"obs": obs, "name": name}); err != nil {
					t.Fatal(err)
				}
				clear(obs.Data)
				clear(name.Strings[0])
				err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("obs").At(-1).Squeeze(), w.History("name").At(-1).Squeeze()})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for k, smp := range wtSampleN(t, s.Client, "q", n) {
				wtCheckColumn(t, fmt.Sprintf("sample %d obs", k), smp.cols[0], wtObs(k))
				wtCheckColumn(t, fmt.Sprintf("sample %d name", k), smp.cols[1], wtName(k))
			}
		})
	}
}

// TestWriterTableNotUTF8 checks that CreateItem refuses a table name that
// is not valid UTF-8, which a proto3 string field cannot carry.
func TestWriterTableNotUTF8(t *testing.T) {
	_, c := wtStart(t, server.QueueTable("q", 10))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 1})
	if err := w.Append(ctx, map[string]client.Tensor{"obs": wtObs(0)}); err != nil {
		t.Fatal(err)
	}
	err := w.CreateItem(ctx, "q\xff", 1, []client.TrajectoryColumn{w.History("obs").At(-1)})
	if !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("CreateItem with a table name that is not UTF-8: %v, want ErrInvalidArgument", err)
	}
	if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("obs").At(-1)}); err != nil {
		t.Fatalf("CreateItem after the refused one: %v", err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// wtBig is a step of random float32s that Snappy cannot shrink, so that
// chunks of it are encoded into pooled buffers.
func wtBig(i int) client.Tensor { return wtRandom(i, 5000) }

// wtRandom is a vector of n random float32s, seeded by i, which Snappy
// leaves as they are.
func wtRandom(i, n int) client.Tensor {
	r := rand.New(rand.NewPCG(uint64(i), 3))
	vals := make([]float32, n)
	for j := range vals {
		vals[j] = r.Float32()
	}
	return client.Vector(vals)
}

// TestWriterResendBigChunks loses the confirmations of items with big
// chunks (pooled buffers, handed to gRPC without copying), breaks the
// connection so that they are re-sent, goes on writing (freed buffers are
// reused, and the tests poison them), and checks every item the server
// holds.
func TestWriterResendBigChunks(t *testing.T) {
	s := servertest.Start(t, server.Config{Tables: []server.TableConfig{server.QueueTable("q", 100)}})
	proxy := wtStartProxy(t, s.Addr)
	var rec wtRecorder
	c := wtDial(t, proxy.lis.Addr().String(), client.WithDialOptions(grpc.WithStreamInterceptor(rec.interceptor)))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 3, ChunkLength: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	write := func(from, to int) {
		for i := from; i < to; i++ {
			if err := w.Append(ctx, map[string]client.Tensor{"obs": wtBig(i)}); err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("obs").Last(2), w.History("obs").At(-1).Squeeze()}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	const total = 40
	write(0, 10)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Items sent while the server's replies are lost (flow control stops
	// the stream soon, too) are re-sent on a new connection.
	proxy.mute.Store(true)
	write(10, 20)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := w.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush without confirmations = %v, want context.DeadlineExceeded", err)
	}
	proxy.mute.Store(false)
	proxy.drop()
	write(20, total+1)
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after reconnecting: %v", err)
	}
	if n := len(rec.itemKeys()); n < 2 {
		t.Fatalf("%d insert streams, want a second one after the connection broke", n)
	}
	for k, smp := range wtSampleN(t, s.Client, "q", total) {
		wtCheckColumn(t, fmt.Sprintf("sample %d column 0", k), smp.cols[0], wtStack(t, wtRange(k, k+2, wtBig)))
		wtCheckColumn(t, fmt.Sprintf("sample %d column 1", k), smp.cols[1], wtBig(k+1))
	}
}

// TestWriterRequestSize queues items of 256 KiB while the insert stream
// cannot open, then checks how the writer batches them once it can: more
// than one item per request, and no request past 4 MiB by more than its
// last item: a gRPC-Go server holds each request whole, so a writer keeps
// them near 4 MiB rather than Reverb's 40 MiB.
func TestWriterRequestSize(t *testing.T) {
	s, _ := wtStart(t, server.QueueTable("q", 100))
	var rec wtRecorder
	release := make(chan struct{})
	gate := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return rec.interceptor(ctx, desc, cc, method, streamer, opts...)
	}
	c := wtDial(t, s.Addr, client.WithDialOptions(grpc.WithStreamInterceptor(gate)))
	ctx := wtCtx(t)
	w := wtWriter(t, c, client.WriterOptions{NumKeepAliveRefs: 1, ChunkLength: 1})

	const n, floats, maxRequest = 24, 64 << 10, 4 << 20
	for i := range n {
		if err := w.Append(ctx, map[string]client.Tensor{"obs": wtRandom(i, floats)}); err != nil {
			t.Fatal(err)
		}
		if err := w.CreateItem(ctx, "q", 1, []client.TrajectoryColumn{w.History("obs").At(-1).Squeeze()}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.streams) != 1 {
		t.Fatalf("%d insert streams, want 1", len(rec.streams))
	}
	items := 0
	for r, req := range rec.streams[0] {
		size := proto.Size(req)
		itemSize := size / max(len(req.GetItems()), 1)
		if size > maxRequest+itemSize+(1<<10) {
			t.Errorf("request %d: %d bytes for %d items, want at most %d plus one item", r, size, len(req.GetItems()), maxRequest)
		}
		if r == 0 && len(req.GetItems()) < 2 {
			t.Errorf("request 0: %d items, want the queued items batched", len(req.GetItems()))
		}
		items += len(req.GetItems())
	}
	if items != n {
		t.Errorf("sent %d items, want %d", items, n)
	}
}
