package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/selector"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fuzzServer has a prioritized table and a queue, so that priorities and
// rate limiting are both in play.
func fuzzServer(t testing.TB) *Server {
	s, err := New(Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tables: []TableConfig{
			{
				Name:        "prio",
				Sampler:     selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 0.5},
				Remover:     selector.Spec{Kind: selector.KindMinHeap},
				MaxSize:     3,
				RateLimiter: MinSize(1),
			},
			QueueTable("queue", 2),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fuzzSeedChunk(key uint64, rows int64) *reverbpb.ChunkData {
	return &reverbpb.ChunkData{
		ChunkKey:      key,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: 9, End: int32(rows - 1)},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:       tensorflowpb.DataType_DT_INT32,
			TensorShape: &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: rows}}},
		}}},
		DataTensorsLen: 1,
	}
}

func fuzzSeedItem(key uint64, table string, prio float64, ck uint64, off, n int32) *reverbpb.PrioritizedItem {
	return &reverbpb.PrioritizedItem{Key: key, Table: table, Priority: prio, FlatTrajectory: &reverbpb.FlatTrajectory{
		Columns: []*reverbpb.FlatTrajectory_Column{{ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: ck, Offset: off, Length: n}}}},
	}}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzInsertStream feeds two arbitrary InsertStreamRequests, decoded by the
// server's codec, to one stream's handler, then one SampleStreamRequest.
// Whatever the bytes, the handlers must not panic, the codec must accept
// exactly what proto.Unmarshal accepts, every error must map to a
// deliberate status code, and once the stream ends and the tables are
// reset no chunk may be left.
func FuzzInsertStream(f *testing.F) {
	good := &reverbpb.InsertStreamRequest{
		Chunks:        []*reverbpb.ChunkData{fuzzSeedChunk(1, 3), fuzzSeedChunk(2, 1)},
		Items:         []*reverbpb.PrioritizedItem{fuzzSeedItem(10, "prio", 1, 1, 0, 3), fuzzSeedItem(11, "queue", 0, 2, 0, 1)},
		KeepChunkKeys: []uint64{1},
	}
	next := &reverbpb.InsertStreamRequest{Items: []*reverbpb.PrioritizedItem{fuzzSeedItem(12, "prio", 2, 1, 1, 1)}}
	bad := []*reverbpb.InsertStreamRequest{
		{},
		{Items: []*reverbpb.PrioritizedItem{fuzzSeedItem(1, "prio", 1, 5, 0, 1)}},
		{Chunks: []*reverbpb.ChunkData{fuzzSeedChunk(1, 1)}, Items: []*reverbpb.PrioritizedItem{fuzzSeedItem(1, "nope", 1, 1, 0, 1)}},
		{Chunks: []*reverbpb.ChunkData{fuzzSeedChunk(1, 1)}, Items: []*reverbpb.PrioritizedItem{fuzzSeedItem(1, "prio", math.NaN(), 1, 0, 1)}},
		{Chunks: []*reverbpb.ChunkData{fuzzSeedChunk(1, 1)}, Items: []*reverbpb.PrioritizedItem{fuzzSeedItem(1, "prio", 1, 1, -1, 5)}},
		{Chunks: []*reverbpb.ChunkData{fuzzSeedChunk(1, 1)}, Items: []*reverbpb.PrioritizedItem{fuzzSeedItem(1, "prio", 1, 1, 0, 1)}, KeepChunkKeys: []uint64{1, 1}},
	}
	sample := &reverbpb.SampleStreamRequest{Table: "prio", NumSamples: 3, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: 0}}
	f.Add(mustMarshal(f, good), mustMarshal(f, next), mustMarshal(f, sample))
	for _, b := range bad {
		f.Add(mustMarshal(f, b), mustMarshal(f, good), mustMarshal(f, &reverbpb.SampleStreamRequest{Table: "queue", NumSamples: 1}))
	}
	f.Add([]byte{0xff, 0x01}, []byte{}, []byte{0x10, 0x80})
	// Groups (field 15, holding field 1 as a varint and a nested group of
	// field 2) before a good request.
	f.Add(append([]byte{0x7b, 0x08, 0x01, 0x13, 0x14, 0x7c}, mustMarshal(f, good)...), mustMarshal(f, next), mustMarshal(f, sample))

	f.Fuzz(func(t *testing.T, b1, b2, b3 []byte) {
		s := fuzzServer(t)
		defer s.Close()
		// The rate limiter may block: bound every wait.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()

		ist := newFuzzInsertStream(s)
		for _, b := range [][]byte{b1, b2} {
			req := decodeInsert(t, b)
			if err := ist.handle(ctx, req, func(uint64, uint64) {}); err != nil {
				checkStatus(t, err)
				break
			}
		}
		ist.releaseAll()

		sreq := &reverbpb.SampleStreamRequest{}
		if proto.Unmarshal(b3, sreq) == nil {
			err := s.serveSampleRequest(ctx, sreq, &responseBuilder{}, func(m *rawMessage) error {
				_, err := decodeResponse(m)
				return err
			})
			checkStatus(t, err)
		}
		for _, name := range s.names {
			if err := s.tables[name].Reset(); err != nil {
				t.Fatal(err)
			}
		}
		if n, b := s.ChunkStoreStats(); n != 0 || b != 0 {
			t.Fatalf("%d chunks (%d bytes) left after the stream ended and the tables were reset", n, b)
		}
	})
}

// checkStatus fails unless err maps to a status code chosen on purpose.
func checkStatus(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	switch code := status.Code(toStatus(err)); code {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition:
	case codes.DeadlineExceeded:
		if !errors.Is(err, context.DeadlineExceeded) && status.Convert(toStatus(err)).Message() != rateLimiterTimeoutMessage {
			t.Fatalf("deadline exceeded for an unexpected reason: %v", err)
		}
	default:
		t.Fatalf("error %v maps to %v; want a deliberate code", err, code)
	}
}

func newFuzzInsertStream(s *Server) *insertStream {
	return &insertStream{srv: s, held: make(map[uint64]*chunkstore.Chunk)}
}

// FuzzSampleStream serves arbitrary SampleStreamRequests from a populated
// server and checks the framing of what it sends: never more samples than
// asked, info on each sample's first entry only, every sample complete.
func FuzzSampleStream(f *testing.F) {
	for _, r := range []*reverbpb.SampleStreamRequest{
		{Table: "prio", NumSamples: 5},
		{Table: "queue", NumSamples: 2, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: 1}},
		{Table: "prio", NumSamples: 0},
		{Table: "prio", NumSamples: -1},
		{Table: "nope", NumSamples: 1},
		{Table: "queue", NumSamples: 1 << 40, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: -7}},
	} {
		f.Add(mustMarshal(f, r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &reverbpb.SampleStreamRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		s := fuzzServer(t)
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		ist := newFuzzInsertStream(s)
		err := ist.handle(ctx, insertRequestOf(t, &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{fuzzSeedChunk(1, 2)},
			Items: []*reverbpb.PrioritizedItem{
				fuzzSeedItem(1, "prio", 1, 1, 0, 2), fuzzSeedItem(2, "prio", 0, 1, 1, 1),
				fuzzSeedItem(3, "queue", 1, 1, 0, 1), fuzzSeedItem(4, "queue", 1, 1, 1, 1),
			},
		}), func(uint64, uint64) {})
		if err != nil {
			t.Fatal(err)
		}
		ist.releaseAll()

		complete, open := int64(0), false
		err = s.serveSampleRequest(ctx, req, &responseBuilder{}, func(m *rawMessage) error {
			resp, err := decodeResponse(m)
			if err != nil {
				t.Fatalf("the server sent a response that does not decode: %v", err)
			}
			for _, e := range resp.GetEntries() {
				if (e.GetInfo() != nil) == open {
					t.Fatalf("entry info present = %v inside an open sample = %v", e.GetInfo() != nil, open)
				}
				open = !e.GetEndOfSequence()
				if !open {
					complete++
				}
			}
			return nil
		})
		checkStatus(t, err)
		if open {
			t.Fatal("a sample was left incomplete")
		}
		if complete > max(req.GetNumSamples(), 0) {
			t.Fatalf("sent %d samples for num_samples %d", complete, req.GetNumSamples())
		}
		if err == nil && complete != req.GetNumSamples() {
			t.Fatalf("sent %d samples for num_samples %d without an error", complete, req.GetNumSamples())
		}
	})
}
