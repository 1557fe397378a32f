package server_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

// TestCancelledStreamsEnd: when a client cancels its streams between
// requests (an actor or a learner killed, a dataset iterator dropped), the
// server's handlers end while the server keeps running, and the chunks an
// insert stream held are released. Stopping the server would end a stuck
// handler anyway, which is why the package's leak check at exit cannot see
// this. The receiving goroutine may see the cancellation first and end
// without handing its error over, so the round is repeated: a handler that
// waited only for that goroutine would be stuck about every other time.
func TestCancelledStreamsEnd(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("replay", 100, server.MinSize(1))))
	if _, err := insertAll(ctxT(t), s.Client, &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)},
		Items:  []*reverbpb.PrioritizedItem{item(1, "replay", 1, 1, 0, 1)},
	}); err != nil {
		t.Fatal(err)
	}
	waitChunks(t, s.Server, 1)

	for i := range 20 {
		ctx, cancel := context.WithCancel(ctxT(t))
		ins, err := s.Client.InsertStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A chunk no item names yet: the stream holds it.
		if err := ins.Send(&reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(uint64(100+i), 2, 1)}}); err != nil {
			t.Fatal(err)
		}
		smp, err := s.Client.SampleStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := smp.Send(&reverbpb.SampleStreamRequest{Table: "replay", NumSamples: 1, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: 2000}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := smp.Recv(); err != nil || !resp.GetEntries()[len(resp.GetEntries())-1].GetEndOfSequence() {
			t.Fatalf("round %d: sample: %v %v", i, resp, err)
		}
		// Both handlers are now waiting for their next request.
		waitChunks(t, s.Server, 2)
		cancel()
		waitChunks(t, s.Server, 1)
		deadline := time.Now().Add(5 * time.Second)
		for handlers("InsertStream")+handlers("SampleStream") > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d insert and %d sample handlers still running after their client cancelled",
					i, handlers("InsertStream"), handlers("SampleStream"))
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// waitChunks waits until the server holds n chunks.
func waitChunks(t *testing.T, s *server.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		chunks, _ := s.ChunkStoreStats()
		if chunks == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d chunks, want %d", chunks, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// handlers counts the goroutines running the server's handler of the named
// ReverbService method (a frame of it, not a "created by" line).
func handlers(method string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Count(string(buf), "server.(*Server)."+method+"(")
}

// TestCloseWaitsForHandlers: Close returns once every handler has, since
// it then closes the log and the chunk store that handlers use. gRPC-Go's
// Stop does not wait for handlers unless asked to.
func TestCloseWaitsForHandlers(t *testing.T) {
	for round := range 10 {
		s := servertest.Start(t, testConfig(uniformTable("replay", 100, server.MinSize(1))))
		ctx := ctxT(t)
		for range 4 {
			smp, err := s.Client.SampleStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The table is empty: the handler waits in the rate limiter.
			if err := smp.Send(&reverbpb.SampleStreamRequest{Table: "replay", NumSamples: 1}); err != nil {
				t.Fatal(err)
			}
			ins, err := s.Client.InsertStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := ins.Send(&reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(uint64(100+round), 2, 1)}}); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for handlers("SampleStream") < 4 || handlers("InsertStream") < 4 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: handlers did not start", round)
			}
			time.Sleep(time.Millisecond)
		}
		s.Server.Close()
		if n := handlers("InsertStream") + handlers("SampleStream"); n > 0 {
			t.Fatalf("round %d: Close returned with %d handlers running", round, n)
		}
	}
}
