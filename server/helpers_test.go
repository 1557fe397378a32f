package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/leakcheck"
	"github.com/reverie-rl/reverie/selector"
	"github.com/reverie-rl/reverie/server"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The S3 driver of remote snapshots keeps idle HTTP connections that
// outlive Close (its SDK offers no way to close them; they time out after
// 90s). They are the only net/http goroutines the server package starts.
func TestMain(m *testing.M) {
	leakcheck.Main(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// chunk makes a chunk of one float32 column with the given rows (payload
// bytes are arbitrary: the server never decodes them).
func chunk(key, episode uint64, rows int) *reverbpb.ChunkData {
	return &reverbpb.ChunkData{
		ChunkKey:      key,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: episode, Start: 0, End: int32(rows - 1)},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:         tensorflowpb.DataType_DT_FLOAT,
			TensorShape:   &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: int64(rows)}}},
			TensorContent: make([]byte, 4*rows),
		}}},
		DataTensorsLen:       1,
		DataUncompressedSize: int64(4 * rows),
	}
}

// item makes an item of one column taking rows [offset, offset+length) of
// chunk ck.
func item(key uint64, table string, prio float64, ck uint64, offset, length int32) *reverbpb.PrioritizedItem {
	return &reverbpb.PrioritizedItem{
		Key:      key,
		Table:    table,
		Priority: prio,
		FlatTrajectory: &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
			ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: ck, Offset: offset, Length: length}},
		}}},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// insertAll sends reqs on one stream, half-closes, and returns the
// confirmed keys and the stream's final status.
func insertAll(ctx context.Context, c reverbpb.ReverbServiceClient, reqs ...*reverbpb.InsertStreamRequest) ([]uint64, error) {
	st, err := c.InsertStream(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if err := st.Send(r); err != nil {
			break // the status comes from Recv
		}
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	var keys []uint64
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return keys, nil
		}
		if err != nil {
			return keys, err
		}
		keys = append(keys, resp.GetKeys()...)
	}
}

// sampleN requests n samples on a new stream and reads complete samples
// until n arrived or the stream fails.
func sampleN(ctx context.Context, c reverbpb.ReverbServiceClient, table string, n int64, timeoutMs int64) ([]*reverbpb.SampleStreamResponse_SampleEntry, error) {
	st, err := c.SampleStream(ctx)
	if err != nil {
		return nil, err
	}
	defer st.CloseSend()
	req := &reverbpb.SampleStreamRequest{Table: table, NumSamples: n, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: timeoutMs}}
	if err := st.Send(req); err != nil {
		return nil, err
	}
	var entries []*reverbpb.SampleStreamResponse_SampleEntry
	done := int64(0)
	for done < n {
		resp, err := st.Recv()
		if err != nil {
			return entries, err
		}
		for _, e := range resp.GetEntries() {
			entries = append(entries, e)
			if e.GetEndOfSequence() {
				done++
			}
		}
	}
	return entries, nil
}

func wantCode(t *testing.T, err error, code codes.Code, substr ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	for _, s := range substr {
		if !contains(st.Message(), s) {
			t.Fatalf("message %q does not mention %q", st.Message(), s)
		}
	}
}

func contains(s, sub string) bool {
	return strings.Contains(s, sub)
}

func testConfig(tables ...server.TableConfig) server.Config {
	return server.Config{Tables: tables, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func uniformTable(name string, maxSize int64, rl server.RateLimiter) server.TableConfig {
	return server.TableConfig{
		Name:        name,
		Sampler:     selector.Spec{Kind: selector.KindUniform},
		Remover:     selector.Spec{Kind: selector.KindFIFO},
		MaxSize:     maxSize,
		RateLimiter: rl,
	}
}

func prioritizedTable(name string, maxSize int64) server.TableConfig {
	return server.TableConfig{
		Name:        name,
		Sampler:     selector.Spec{Kind: selector.KindPrioritized, PriorityExponent: 1},
		Remover:     selector.Spec{Kind: selector.KindFIFO},
		MaxSize:     maxSize,
		RateLimiter: server.MinSize(1),
	}
}
