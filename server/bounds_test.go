package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestSampleBatchesAreBounded asks for 2^40 samples of one item: the
// batches the server takes from the table double up to MaxSampleBatch and
// no further. Each response is checked as the server hands it over,
// before it takes its next batch, against the samples the table counts.
func TestSampleBatchesAreBounded(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("u", 10, server.MinSize(1))))
	if _, err := insertAll(ctxT(t), s.Client, &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)},
		Items:  []*reverbpb.PrioritizedItem{item(1, "u", 1, 1, 0, 1)},
	}); err != nil {
		t.Fatal(err)
	}
	// Doubling batches would have taken 32,640 samples after eight
	// batches and 65,408 after nine; stop after the tenth's worth.
	const want = 40_000
	var sent, biggest int64
	errStop := errors.New("enough")
	err := server.ServeSampleRequest(ctxT(t), s.Server, &reverbpb.SampleStreamRequest{Table: "u", NumSamples: 1 << 40},
		func(resp *reverbpb.SampleStreamResponse) error {
			n := int64(0)
			for _, e := range resp.GetEntries() {
				if e.GetEndOfSequence() {
					n++
				}
			}
			sent += n
			biggest = max(biggest, n)
			// Every sample the table gave out is in this response or
			// an earlier one: a batch is taken only once the one before
			// it was handed over.
			if stats, _ := s.TableStats("u"); stats.Samples != sent {
				return fmt.Errorf("the table gave out %d samples, %d were sent", stats.Samples, sent)
			}
			if sent >= want {
				return errStop
			}
			return nil
		})
	if !errors.Is(err, errStop) {
		t.Fatalf("after %d samples: %v", sent, err)
	}
	// A response holds samples of one batch, and these are small enough
	// for a batch to fit in one response.
	if biggest != server.MaxSampleBatch {
		t.Fatalf("the largest batch had %d samples, want %d", biggest, server.MaxSampleBatch)
	}
}

// TestShutdownEndsInitializeConnection: a client that opened
// InitializeConnection and sent nothing does not hold up a drain; its call
// ends with UNAVAILABLE.
func TestShutdownEndsInitializeConnection(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("u", 10, server.MinSize(1))))
	st, err := s.Client.InitializeConnection(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the handler to start (gRPC-Go sends no headers before it
	// answers, so the client cannot tell).
	const started = `reverie_rpcs_started_total{method=/deepmind.reverb.ReverbService/InitializeConnection}`
	for deadline := time.Now().Add(10 * time.Second); gather(t, s.Server.Collector())[started] < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("InitializeConnection did not start on the server")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Server.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after %v: %v", time.Since(start), err)
	}
	_, err = st.Recv()
	wantCode(t, err, codes.Unavailable)
}

// TestShutdownEndsHealthWatch: a client watching the health service (as
// gRPC's client-side health checking does) does not hold up a drain; it
// reads NOT_SERVING, then UNAVAILABLE. gRPC-Go's own Watch kept the call
// open until the drain's timeout, which then cancelled every stream
// (found by review).
func TestShutdownEndsHealthWatch(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("u", 10, server.MinSize(1))))
	w, err := healthpb.NewHealthClient(s.Conn).Watch(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first status: %v %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Server.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after %v: %v", time.Since(start), err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("status while draining: %v %v", r, err)
	}
	_, err = w.Recv()
	wantCode(t, err, codes.Unavailable)
}
