package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// patternChunk is a chunk of rows float32 rows whose bytes are its key,
// repeated, so that a reader can tell whose bytes it got.
func patternChunk(key uint64, rows int) *reverbpb.ChunkData {
	c := chunk(key, key, rows)
	b := c.Data.Tensors[0].TensorContent
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], key)
	}
	return c
}

// checkPattern fails unless c is patternChunk(key, ...).
func checkPattern(c *reverbpb.ChunkData, key uint64) error {
	if c.GetChunkKey() != key {
		return fmt.Errorf("chunk key %d, want %d", c.GetChunkKey(), key)
	}
	b := c.GetData().GetTensors()[0].GetTensorContent()
	var want [8]byte
	binary.LittleEndian.PutUint64(want[:], key)
	for i := 0; i+8 <= len(b); i += 8 {
		if !bytes.Equal(b[i:i+8], want[:]) {
			return fmt.Errorf("chunk %d: bytes %d-%d are %x, not its key", key, i, i+8, b[i:i+8])
		}
	}
	return nil
}

// TestRecycledChunksUnderChurn: the buffers of evicted chunks are reused
// for new ones (chunkstore's recycle.go), while samplers and checkpoints
// still read chunks that leave the table. Every sampled and every
// checkpointed chunk must hold its own bytes; the stores overwrite
// released buffers in tests (PoisonRecycled), so a read after reuse shows.
// Chunks of 48 kB are reused and handed to gRPC as they are stored;
// chunks of 20 kB, below the store's minimum, are neither.
func TestRecycledChunksUnderChurn(t *testing.T) {
	for _, rows := range []int{5_000, 12_000} {
		t.Run(fmt.Sprintf("%dB", 4*rows), func(t *testing.T) { testRecycledChunksUnderChurn(t, rows) })
	}
}

func testRecycledChunksUnderChurn(t *testing.T, rows int) {
	const (
		writers   = 2
		perWriter = 150
		maxSize   = 12
	)
	dir := t.TempDir()
	s := servertest.Start(t, ckptConfig(dir, uniformTable("t", maxSize, server.MinSize(1))))
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	var writing sync.WaitGroup
	for w := range writers {
		writing.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer writing.Done()
			var reqs []*reverbpb.InsertStreamRequest
			for i := range perWriter {
				key := uint64(1 + w*perWriter + i)
				reqs = append(reqs, &reverbpb.InsertStreamRequest{
					Chunks: []*reverbpb.ChunkData{patternChunk(key, rows)},
					Items:  []*reverbpb.PrioritizedItem{item(key, "t", 1, key, 0, int32(rows))},
				})
			}
			if _, err := insertAll(ctx, s.Client, reqs...); err != nil {
				errs <- fmt.Errorf("writer %d: %w", w, err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { writing.Wait(); close(done) }()
	sampled := make([]int, 2)
	for r := range sampled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				entries, err := sampleN(ctx, s.Client, "t", 16, 1000)
				if status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil {
					// Nothing inserted yet: on a loaded machine the
					// writers' first item can take longer than the
					// sampler's 1 s. Ask again until the writers are done.
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("sampler %d: %w", r, err)
					return
				}
				for _, e := range entries {
					key := e.GetInfo().GetItem().GetKey()
					if err := checkPattern(e.GetData()[0], key); err != nil {
						errs <- fmt.Errorf("sampler %d: %w", r, err)
						return
					}
				}
				sampled[r] += len(entries)
			}
		}()
	}
	wg.Add(1)
	go func() { // checkpoints read chunks that leave the table meanwhile
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.Client.Checkpoint(ctx, &reverbpb.CheckpointRequest{}); err != nil {
				errs <- fmt.Errorf("checkpoint: %w", err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if sampled[0] == 0 || sampled[1] == 0 {
		t.Fatalf("samplers got %v samples; the test needs both to sample", sampled)
	}
	st := server.ChunkFreeStats(s.Server)
	if reused := 4*rows >= 32<<10; reused != (st.Reused > 0) {
		t.Fatalf("%d-byte chunks: buffers %+v, want reuse %v", 4*rows, st, reused)
	}
	t.Logf("samples %v, buffers %+v", sampled, st)

	// The last checkpoint, taken after the churn, holds every item's own
	// bytes.
	path := checkpointNow(t, s.Client)
	b := servertest.Start(t, server.Config{Tables: []server.TableConfig{uniformTable("t", maxSize, server.MinSize(1))}, RestorePath: path})
	st2, err := b.Client.SampleStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.CloseSend()
	if err := st2.Send(&reverbpb.SampleStreamRequest{Table: "t", NumSamples: 64, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: 1000}}); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 64; {
		resp, err := st2.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEntries() {
			if err := checkPattern(e.GetData()[0], e.GetInfo().GetItem().GetKey()); err != nil {
				t.Fatalf("restored: %v", err)
			}
			n++
		}
	}
}
