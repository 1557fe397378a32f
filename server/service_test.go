package server_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

func TestInsertSampleRoundTrip(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("replay", 100, server.MinSize(1))))
	ctx := ctxT(t)
	ck := chunk(11, 5, 4)
	keys, err := insertAll(ctx, s.Client, &reverbpb.InsertStreamRequest{
		Chunks:        []*reverbpb.ChunkData{ck},
		Items:         []*reverbpb.PrioritizedItem{item(1, "replay", 1.5, 11, 1, 2), item(2, "replay", 1.5, 11, 0, 4)},
		KeepChunkKeys: nil,
	})
	if err != nil || len(keys) != 2 || keys[0] != 1 || keys[1] != 2 {
		t.Fatalf("confirmed %v, %v; want [1 2]", keys, err)
	}
	before := time.Now()
	entries, err := sampleN(ctx, s.Client, "replay", 4, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Fatalf("got %d entries, want 4 (one per sample)", len(entries))
	}
	for _, e := range entries {
		info := e.GetInfo()
		if !e.GetEndOfSequence() || info == nil || len(e.GetData()) != 1 {
			t.Fatalf("entry %v: want info, one chunk and end_of_sequence", e)
		}
		if !proto.Equal(e.GetData()[0], ck) {
			t.Fatalf("chunk came back changed")
		}
		it := info.GetItem()
		if info.GetProbability() != 0.5 || info.GetTableSize() != 2 || it.GetPriority() != 1.5 || it.GetTimesSampled() < 1 || it.GetTable() != "replay" {
			t.Fatalf("info %v", info)
		}
		if at := it.GetInsertedAt().AsTime(); at.After(before) || before.Sub(at) > time.Minute {
			t.Fatalf("inserted_at %v not stamped at insert", at)
		}
		if it.GetKey() == 1 && it.GetFlatTrajectory().GetColumns()[0].GetChunkSlices()[0].GetOffset() != 1 {
			t.Fatalf("trajectory of item 1 came back changed: %v", it.GetFlatTrajectory())
		}
	}
	info, err := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ti := info.GetTableInfo()[0]
	if ti.GetCurrentSize() != 2 || ti.GetNumEpisodes() != 1 || ti.GetRateLimiterInfo().GetSampleStats().GetCompleted() != 4 ||
		ti.GetRateLimiterInfo().GetInsertStats().GetCompleted() != 2 || ti.GetNumUniqueSamples() < 1 {
		t.Fatalf("table info %v", ti)
	}
	if ti.Signature != nil {
		t.Fatal("a table without signature reported one")
	}
}

func TestServerInfo(t *testing.T) {
	sig := &tensorflowpb.StructuredValue{Kind: &tensorflowpb.StructuredValue_TensorSpecValue{TensorSpecValue: &tensorflowpb.TensorSpecProto{
		Dtype: tensorflowpb.DataType_DT_INT64,
		Shape: &tensorflowpb.TensorShapeProto{},
	}}}
	q := server.QueueTable("queue", 10)
	q.Signature = sig
	s := servertest.Start(t, testConfig(q, prioritizedTable("prio", 1000)))
	ctx := ctxT(t)
	a, err := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	id := a.GetTablesStateId()
	if id.GetHigh() == 0 && id.GetLow() == 0 || !proto.Equal(id, b.GetTablesStateId()) {
		t.Fatalf("tables_state_id %v then %v: want non-zero and constant", id, b.GetTablesStateId())
	}
	byName := map[string]*reverbpb.TableInfo{}
	for _, ti := range a.GetTableInfo() {
		byName[ti.GetName()] = ti
	}
	qi, pi := byName["queue"], byName["prio"]
	if !proto.Equal(qi.GetSignature(), sig) {
		t.Fatalf("queue signature %v, want %v", qi.GetSignature(), sig)
	}
	if pi.Signature != nil {
		t.Fatal("prio has no signature but reported one")
	}
	if !qi.GetSamplerOptions().GetFifo() || !qi.GetSamplerOptions().GetIsDeterministic() || qi.GetMaxTimesSampled() != 1 ||
		qi.GetRateLimiterInfo().GetMaxDiff() != 10 || qi.GetRateLimiterInfo().GetMinDiff() != 0 {
		t.Fatalf("queue info %v", qi)
	}
	if pi.GetSamplerOptions().GetPrioritized().GetPriorityExponent() != 1 || pi.GetSamplerOptions().GetIsDeterministic() ||
		pi.GetRateLimiterInfo().GetMinDiff() != -math.MaxFloat64 || pi.GetMaxSize() != 1000 {
		t.Fatalf("prio info %v", pi)
	}
}

// TestBadInput sends each kind of malformed request on its own stream and
// checks the status code and that the message names the field, while a
// healthy client keeps inserting and sampling.
func TestBadInput(t *testing.T) {
	s := servertest.Start(t, testConfig(prioritizedTable("prio", 1000), uniformTable("replay", 1000, server.MinSize(1))))
	ctx := ctxT(t)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := uint64(1); ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			keys, err := insertAll(ctx, s.Client, &reverbpb.InsertStreamRequest{
				Chunks: []*reverbpb.ChunkData{chunk(1_000_000+k, 1, 1)},
				Items:  []*reverbpb.PrioritizedItem{item(1_000_000+k, "replay", 1, 1_000_000+k, 0, 1)},
			})
			if err != nil || len(keys) != 1 {
				t.Errorf("healthy writer: %v %v", keys, err)
				return
			}
			if _, err := sampleN(ctx, s.Client, "replay", 1, -1); err != nil {
				t.Errorf("healthy sampler: %v", err)
				return
			}
		}
	}()

	inserts := []struct {
		name string
		req  *reverbpb.InsertStreamRequest
		code codes.Code
		msg  []string
	}{
		{"empty request", &reverbpb.InsertStreamRequest{}, codes.InvalidArgument, []string{"neither chunks nor items"}},
		{"unknown table", &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)},
			Items:  []*reverbpb.PrioritizedItem{item(1, "nope", 1, 1, 0, 1)},
		}, codes.NotFound, []string{"items[0].table", `"nope"`}},
		{"chunk not held", &reverbpb.InsertStreamRequest{
			Items: []*reverbpb.PrioritizedItem{item(1, "prio", 1, 77, 0, 1)},
		}, codes.FailedPrecondition, []string{"items[0].flat_trajectory.columns[0].chunk_slices[0].chunk_key", "77"}},
		{"keep key not held", &reverbpb.InsertStreamRequest{
			Chunks:        []*reverbpb.ChunkData{chunk(1, 1, 1)},
			Items:         []*reverbpb.PrioritizedItem{item(1, "prio", 1, 1, 0, 1)},
			KeepChunkKeys: []uint64{1, 2},
		}, codes.FailedPrecondition, []string{"keep_chunk_keys[1]", "2"}},
		{"slice past the chunk", &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(1, 1, 3)},
			Items:  []*reverbpb.PrioritizedItem{item(1, "prio", 1, 1, 2, 2)},
		}, codes.InvalidArgument, []string{"items[0].flat_trajectory.columns[0].chunk_slices[0]", "out of range"}},
		{"tensor index out of range", &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(1, 1, 3)},
			Items: []*reverbpb.PrioritizedItem{func() *reverbpb.PrioritizedItem {
				it := item(1, "prio", 1, 1, 0, 1)
				it.FlatTrajectory.Columns[0].ChunkSlices[0].Index = 1
				return it
			}()},
		}, codes.InvalidArgument, []string{"chunk_slices[0].index"}},
		{"negative priority", &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)},
			Items:  []*reverbpb.PrioritizedItem{item(1, "prio", -1, 1, 0, 1)},
		}, codes.InvalidArgument, []string{"items[0].priority"}},
		{"NaN priority", &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)},
			Items:  []*reverbpb.PrioritizedItem{item(1, "prio", math.NaN(), 1, 0, 1)},
		}, codes.InvalidArgument, []string{"items[0].priority"}},
		{"no columns", &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)},
			Items:  []*reverbpb.PrioritizedItem{{Key: 1, Table: "prio", Priority: 1}},
		}, codes.InvalidArgument, []string{"items[0].flat_trajectory.columns"}},
		{"bad squeeze", &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{chunk(1, 1, 3)},
			Items: []*reverbpb.PrioritizedItem{func() *reverbpb.PrioritizedItem {
				it := item(1, "prio", 1, 1, 0, 2)
				it.FlatTrajectory.Columns[0].Squeeze = true
				return it
			}()},
		}, codes.InvalidArgument, []string{"columns[0].squeeze"}},
	}
	for _, tc := range inserts {
		t.Run("insert/"+tc.name, func(t *testing.T) {
			_, err := insertAll(ctx, s.Client, tc.req)
			wantCode(t, err, tc.code, tc.msg...)
		})
	}

	samples := []struct {
		name string
		req  *reverbpb.SampleStreamRequest
		code codes.Code
		msg  []string
	}{
		{"zero samples", &reverbpb.SampleStreamRequest{Table: "replay"}, codes.InvalidArgument, []string{"num_samples"}},
		{"negative samples", &reverbpb.SampleStreamRequest{Table: "replay", NumSamples: -3}, codes.InvalidArgument, []string{"num_samples"}},
		{"unknown table", &reverbpb.SampleStreamRequest{Table: "nope", NumSamples: 1}, codes.NotFound, []string{"table", `"nope"`}},
	}
	for _, tc := range samples {
		t.Run("sample/"+tc.name, func(t *testing.T) {
			st, err := s.Client.SampleStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(tc.req); err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			wantCode(t, err, tc.code, tc.msg...)
		})
	}

	_, err := s.Client.MutatePriorities(ctx, &reverbpb.MutatePrioritiesRequest{Table: "nope"})
	wantCode(t, err, codes.NotFound, "table")
	_, err = s.Client.MutatePriorities(ctx, &reverbpb.MutatePrioritiesRequest{Table: "prio", Updates: []*reverbpb.KeyWithPriority{{Key: 1, Priority: -2}}})
	wantCode(t, err, codes.InvalidArgument, "updates[0].priority")
	_, err = s.Client.Reset(ctx, &reverbpb.ResetRequest{Table: "nope"})
	wantCode(t, err, codes.NotFound, "table")

	close(stop)
	wg.Wait()
	// Failed streams released their chunks; only items hold any: the
	// healthy writer's, and item 1 of "keep key not held", which was
	// applied before its request's keep_chunk_keys failed.
	info, err := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range info.GetTableInfo() {
		if ti.GetName() == "prio" && ti.GetCurrentSize() != 1 {
			t.Fatalf("prio holds %d items, want 1", ti.GetCurrentSize())
		}
		if _, err := s.Client.Reset(ctx, &reverbpb.ResetRequest{Table: ti.GetName()}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := s.ChunkStoreStats(); n != 0 {
		t.Fatalf("%d chunks left after reset", n)
	}
}

func TestRateLimiterTimeout(t *testing.T) {
	s := servertest.Start(t, testConfig(server.QueueTable("queue", 10)))
	ctx := ctxT(t)
	for _, ms := range []int64{0, 50} {
		start := time.Now()
		_, err := sampleN(ctx, s.Client, "queue", 1, ms)
		wantCode(t, err, codes.DeadlineExceeded)
		if got := err.Error(); !contains(got, "Rate Limiter: Timeout exceeded before the right to insert was acquired.") {
			t.Fatalf("timeout %dms: message %q lacks Reverb's text", ms, got)
		}
		if d := time.Since(start); d < time.Duration(ms)*time.Millisecond {
			t.Fatalf("timeout %dms returned after %v", ms, d)
		}
	}
	// Three items, five asked: three samples arrive, then the timeout.
	var reqs []*reverbpb.InsertStreamRequest
	for k := uint64(1); k <= 3; k++ {
		reqs = append(reqs, &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(k, 1, 1)}, Items: []*reverbpb.PrioritizedItem{item(k, "queue", 1, k, 0, 1)}})
	}
	if _, err := insertAll(ctx, s.Client, reqs...); err != nil {
		t.Fatal(err)
	}
	entries, err := sampleN(ctx, s.Client, "queue", 5, 50)
	wantCode(t, err, codes.DeadlineExceeded)
	if len(entries) != 3 {
		t.Fatalf("got %d samples before the timeout, want 3", len(entries))
	}
	for i, e := range entries {
		if e.GetInfo().GetItem().GetKey() != uint64(i+1) {
			t.Fatalf("queue order: entry %d is key %d", i, e.GetInfo().GetItem().GetKey())
		}
	}
}

// TestNeverSamplesMoreThanAsked checks exact counts across requests on one
// stream, which Reverb's clients rely on.
func TestNeverSamplesMoreThanAsked(t *testing.T) {
	s := servertest.Start(t, testConfig(server.QueueTable("queue", 1000)))
	ctx := ctxT(t)
	var reqs []*reverbpb.InsertStreamRequest
	for k := uint64(1); k <= 300; k++ {
		reqs = append(reqs, &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(k, 1, 1)}, Items: []*reverbpb.PrioritizedItem{item(k, "queue", 1, k, 0, 1)}})
	}
	if keys, err := insertAll(ctx, s.Client, reqs...); err != nil || len(keys) != 300 {
		t.Fatalf("inserted %d: %v", len(keys), err)
	}
	st, err := s.Client.SampleStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	for _, n := range []int64{7, 200, 3} {
		if err := st.Send(&reverbpb.SampleStreamRequest{Table: "queue", NumSamples: n, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: -1}}); err != nil {
			t.Fatal(err)
		}
		for got := int64(0); got < n; {
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range resp.GetEntries() {
				if k := e.GetInfo().GetItem().GetKey(); k != next {
					t.Fatalf("got key %d, want %d", k, next)
				}
				next++
				got++
			}
		}
	}
	st.CloseSend()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after half-close: %v, want EOF", err)
	}
	info, _ := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if got := info.GetTableInfo()[0].GetRateLimiterInfo().GetSampleStats().GetCompleted(); got != 210 {
		t.Fatalf("server counted %d samples, want 210", got)
	}
	if got := info.GetTableInfo()[0].GetCurrentSize(); got != 90 {
		t.Fatalf("current_size %d, want 90", got)
	}
}

func TestLargeMessagesAndFraming(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("replay", 10, server.MinSize(1))))
	ctx := ctxT(t)
	// Three 3 MiB chunks in one 9 MiB request, past gRPC's 4 MiB default.
	var chunks []*reverbpb.ChunkData
	var slices []*reverbpb.FlatTrajectory_ChunkSlice
	for k := uint64(1); k <= 3; k++ {
		c := chunk(k, 1, 1)
		c.Data.Tensors[0].TensorContent = make([]byte, 3<<20)
		chunks = append(chunks, c)
		slices = append(slices, &reverbpb.FlatTrajectory_ChunkSlice{ChunkKey: k, Length: 1})
	}
	it := &reverbpb.PrioritizedItem{Key: 9, Table: "replay", Priority: 1, FlatTrajectory: &reverbpb.FlatTrajectory{
		Columns: []*reverbpb.FlatTrajectory_Column{{ChunkSlices: slices}},
	}}
	if keys, err := insertAll(ctx, s.Client, &reverbpb.InsertStreamRequest{Chunks: chunks, Items: []*reverbpb.PrioritizedItem{it}}); err != nil || len(keys) != 1 {
		t.Fatalf("insert: %v %v", keys, err)
	}
	st, err := s.Client.SampleStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reverbpb.SampleStreamRequest{Table: "replay", NumSamples: 1}); err != nil {
		t.Fatal(err)
	}
	// The sample spans messages: info on the first entry only, chunks in
	// order, end_of_sequence on the last.
	var got []uint64
	msgs := 0
	for done := false; !done; {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		msgs++
		for i, e := range resp.GetEntries() {
			if (msgs == 1 && i == 0) != (e.GetInfo() != nil) {
				t.Fatalf("message %d entry %d: info present = %v", msgs, i, e.GetInfo() != nil)
			}
			for _, c := range e.GetData() {
				got = append(got, c.GetChunkKey())
			}
			done = e.GetEndOfSequence()
		}
	}
	if msgs < 2 || len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("%d messages carrying chunks %v; want >= 2 messages with [1 2 3]", msgs, got)
	}
	st.CloseSend()
}

// TestConfirmationsWhileBlocked: an item applied before a blocked one in the
// same request is confirmed without waiting for the blocked one.
func TestConfirmationsWhileBlocked(t *testing.T) {
	s := servertest.Start(t, testConfig(server.QueueTable("queue", 1)))
	ctx := ctxT(t)
	st, err := s.Client.InsertStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(&reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{chunk(1, 1, 2)},
		Items:  []*reverbpb.PrioritizedItem{item(1, "queue", 1, 1, 0, 1), item(2, "queue", 1, 1, 1, 1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil || len(resp.GetKeys()) != 1 || resp.GetKeys()[0] != 1 {
		t.Fatalf("first confirmation %v %v, want [1]", resp, err)
	}
	if _, err := sampleN(ctx, s.Client, "queue", 1, -1); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.GetKeys()[0] != 2 {
		t.Fatalf("second confirmation %v %v, want [2]", resp, err)
	}
	st.CloseSend()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after half-close: %v", err)
	}
}

// TestKeepChunkKeys: chunks named in keep_chunk_keys stay usable by later
// requests; others are dropped.
func TestKeepChunkKeys(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("replay", 10, server.MinSize(1))))
	ctx := ctxT(t)
	keys, err := insertAll(ctx, s.Client,
		&reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(1, 1, 2), chunk(2, 1, 2)}},
		&reverbpb.InsertStreamRequest{Items: []*reverbpb.PrioritizedItem{item(10, "replay", 1, 1, 0, 2)}, KeepChunkKeys: []uint64{2}},
		&reverbpb.InsertStreamRequest{Items: []*reverbpb.PrioritizedItem{item(11, "replay", 1, 2, 0, 1)}, KeepChunkKeys: []uint64{2}},
	)
	if err != nil || len(keys) != 2 {
		t.Fatalf("confirmed %v: %v", keys, err)
	}
	_, err = insertAll(ctx, s.Client,
		&reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(3, 1, 2)}, Items: []*reverbpb.PrioritizedItem{item(12, "replay", 1, 3, 0, 1)}},
		&reverbpb.InsertStreamRequest{Items: []*reverbpb.PrioritizedItem{item(13, "replay", 1, 3, 1, 1)}},
	)
	wantCode(t, err, codes.FailedPrecondition, "items[0]", "chunk 3 is not held")
	if n, _ := s.ChunkStoreStats(); n != 3 {
		t.Fatalf("%d chunks held, want 3 (one per stored item's chunk)", n)
	}
}

func TestMutatePrioritiesAndReset(t *testing.T) {
	s := servertest.Start(t, testConfig(prioritizedTable("prio", 100)))
	ctx := ctxT(t)
	var items []*reverbpb.PrioritizedItem
	for k := uint64(1); k <= 4; k++ {
		items = append(items, item(k, "prio", 1, 1, 0, 1))
	}
	if _, err := insertAll(ctx, s.Client, &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)}, Items: items}); err != nil {
		t.Fatal(err)
	}
	// As Reverb's tf_client_test: 4 items at priority 1, one raised to 3.
	if _, err := s.Client.MutatePriorities(ctx, &reverbpb.MutatePrioritiesRequest{Table: "prio", Updates: []*reverbpb.KeyWithPriority{{Key: 2, Priority: 3}}}); err != nil {
		t.Fatal(err)
	}
	entries, err := sampleN(ctx, s.Client, "prio", 50, -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want := 1.0 / 6
		if e.GetInfo().GetItem().GetKey() == 2 {
			want = 0.5
		}
		if p := e.GetInfo().GetProbability(); math.Abs(p-want) > 1e-12 {
			t.Fatalf("key %d probability %v, want %v", e.GetInfo().GetItem().GetKey(), p, want)
		}
	}
	if _, err := s.Client.MutatePriorities(ctx, &reverbpb.MutatePrioritiesRequest{Table: "prio", DeleteKeys: []uint64{1, 2, 99}}); err != nil {
		t.Fatal(err)
	}
	info, _ := s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	if got := info.GetTableInfo()[0].GetCurrentSize(); got != 2 {
		t.Fatalf("current_size %d after deleting 2, want 2", got)
	}
	if _, err := s.Client.Reset(ctx, &reverbpb.ResetRequest{Table: "prio"}); err != nil {
		t.Fatal(err)
	}
	info, _ = s.Client.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	ti := info.GetTableInfo()[0]
	if ti.GetCurrentSize() != 0 || ti.GetRateLimiterInfo().GetInsertStats().GetCompleted() != 0 || ti.GetNumUniqueSamples() != 0 {
		t.Fatalf("after reset: %v", ti)
	}
	if n, _ := s.ChunkStoreStats(); n != 0 {
		t.Fatalf("%d chunks left after reset", n)
	}
}

func TestCheckpointAndInitializeConnection(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("replay", 10, server.MinSize(1))))
	ctx := ctxT(t)
	_, err := s.Client.Checkpoint(ctx, &reverbpb.CheckpointRequest{})
	wantCode(t, err, codes.FailedPrecondition, "no checkpoint directory configured")

	st, err := s.Client.InitializeConnection(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reverbpb.InitializeConnectionRequest{Pid: 1, TableName: "replay"}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil || resp.GetAddress() != 0 {
		t.Fatalf("InitializeConnection: %v %v, want address 0", resp, err)
	}
	st.CloseSend()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("InitializeConnection end: %v", err)
	}
}

func TestHealth(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("replay", 10, server.MinSize(1))))
	resp, err := healthpb.NewHealthClient(s.Conn).Check(ctxT(t), &healthpb.HealthCheckRequest{Service: "deepmind.reverb.ReverbService"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
}

// TestCancelledSamplerLeavesNoRequest: a client that gives up on a blocked
// sample must not leave a table request behind to eat a later sample.
func TestCancelledSamplerLeavesNoRequest(t *testing.T) {
	s := servertest.Start(t, testConfig(server.QueueTable("queue", 10)))
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error)
	go func() {
		_, err := sampleN(ctx, s.Client, "queue", 1, -1)
		errc <- err
	}()
	waitPending(t, s.Server, "queue", 1)
	cancel()
	wantCode(t, <-errc, codes.Canceled)
	// The server learns of the cancellation asynchronously.
	waitPending(t, s.Server, "queue", 0)
	ctx = ctxT(t)
	if _, err := insertAll(ctx, s.Client, &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)}, Items: []*reverbpb.PrioritizedItem{item(1, "queue", 1, 1, 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	entries, err := sampleN(ctx, s.Client, "queue", 1, 2000)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the item went to a cancelled request: %v %v", entries, err)
	}
}

// TestShutdownEndsBlockedStreams: draining fails blocked samplers and
// writers with UNAVAILABLE, which clients retry, and Serve returns.
func TestShutdownEndsBlockedStreams(t *testing.T) {
	srv, err := server.New(testConfig(server.QueueTable("queue", 1)))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	client := reverbpb.NewReverbServiceClient(servertest.Dial(t, lis.Addr().String()))
	ctx := ctxT(t)

	sampleErr := make(chan error)
	go func() {
		_, err := sampleN(ctx, client, "queue", 2, -1)
		sampleErr <- err
	}()
	// An idle writer stream holding a chunk.
	idle, err := client.InsertStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Send(&reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(5, 1, 1)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	wantCode(t, <-sampleErr, codes.Unavailable)
	_, err = idle.Recv()
	wantCode(t, err, codes.Unavailable)
	if err := <-served; !errors.Is(err, server.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if n, _ := srv.ChunkStoreStats(); n != 0 {
		t.Fatalf("%d chunks held after the streams ended", n)
	}
}

func TestUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reverie.sock")
	srv, err := server.New(testConfig(uniformTable("replay", 10, server.MinSize(1))))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := server.Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Close()
		<-served
	}()
	client := reverbpb.NewReverbServiceClient(servertest.Dial(t, "unix://"+path))
	if _, err := client.ServerInfo(ctxT(t), &reverbpb.ServerInfoRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestDualStackLoopback: "localhost:0" accepts both 127.0.0.1 and ::1 on
// one port, as "localhost:PORT" clients with round_robin connect to both.
func TestDualStackLoopback(t *testing.T) {
	if l, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	} else {
		l.Close()
	}
	srv, err := server.New(testConfig(uniformTable("replay", 10, server.MinSize(1))))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := server.Listen("localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Close()
		<-served
	}()
	port := lis.Addr().(*net.TCPAddr).Port
	for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
		client := reverbpb.NewReverbServiceClient(servertest.Dial(t, net.JoinHostPort(host, strconv.Itoa(port))))
		if _, err := client.ServerInfo(ctxT(t), &reverbpb.ServerInfoRequest{}); err != nil {
			t.Fatalf("%s: %v", host, err)
		}
	}
}

func waitPending(t *testing.T, s *server.Server, table string, samples int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, n, _ := s.Pending(table)
		if n == samples {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("table %s: %d pending samples, want %d", table, n, samples)
		}
		time.Sleep(time.Millisecond)
	}
}
