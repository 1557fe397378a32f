package server_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// bigChunk is chunk(key, key, rows) with payload bytes that depend on key,
// so that a mixed-up read shows.
func bigChunk(key uint64, rows int) *reverbpb.ChunkData {
	c := chunk(key, key, rows)
	b := c.Data.Tensors[0].TensorContent
	for i := range b {
		b[i] = byte(key*131 + uint64(i)*7)
	}
	return c
}

// insertBig inserts n chunks of rows rows, one item per chunk, into table.
func insertBig(t *testing.T, c reverbpb.ReverbServiceClient, table string, n, rows int) {
	t.Helper()
	var reqs []*reverbpb.InsertStreamRequest
	for k := 1; k <= n; k++ {
		reqs = append(reqs, &reverbpb.InsertStreamRequest{
			Chunks: []*reverbpb.ChunkData{bigChunk(uint64(k), rows)},
			Items:  []*reverbpb.PrioritizedItem{item(uint64(k), table, 1, uint64(k), 0, int32(rows))},
		})
	}
	keys, err := insertAll(ctxT(t), c, reqs...)
	if err != nil || len(keys) != n {
		t.Fatalf("insert: %d confirmed, %v", len(keys), err)
	}
}

// TestHybridSamplesEverything inserts ten times the memory limit into a
// queue and samples it all back: every chunk comes back byte for byte,
// most of them read from disk, and the store ends empty.
func TestHybridSamplesEverything(t *testing.T) {
	for _, mode := range []server.StorageMode{server.StorageHybrid, server.StorageDisk} {
		t.Run(string(mode), func(t *testing.T) {
			const n, rows = 200, 5000 // 20 kB chunks, 4 MB in all
			limit := int64(n * rows * 4 / 10)
			cfg := testConfig(server.QueueTable("q", n))
			cfg.Storage = server.StorageConfig{Mode: mode, MemoryLimitBytes: limit, Dir: filepath.Join(t.TempDir(), "spill")}
			s := servertest.Start(t, cfg)
			insertBig(t, s.Client, "q", n, rows)
			if st := s.StorageStats(); st.MemoryBytes > limit || st.Spills < n*8/10 {
				t.Fatalf("after insert: %+v (limit %d)", st, limit)
			}
			entries, err := sampleN(ctxT(t), s.Client, "q", n, 1000)
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, e := range entries {
				for _, d := range e.GetData() {
					if !proto.Equal(d, bigChunk(d.GetChunkKey(), rows)) {
						t.Fatalf("chunk %d came back different", d.GetChunkKey())
					}
					seen++
				}
			}
			if seen != n {
				t.Fatalf("sampled %d chunks, want %d", seen, n)
			}
			if st := s.StorageStats(); st.ColdReads < n*8/10 || st.ReadErrors != 0 {
				t.Fatalf("after sampling: %+v", st)
			}
			// The queue let every item go; the sample's pins go once the
			// responses are sent.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if c, _ := s.ChunkStoreStats(); c == 0 && s.StorageStats().MemoryBytes == 0 {
					break
				}
				if time.Now().After(deadline) {
					c, _ := s.ChunkStoreStats()
					t.Fatalf("%d chunks still held, %+v", c, s.StorageStats())
				}
			}
		})
	}
}

// TestHybridFailedRead breaks the disk under a hybrid server: a sample of
// a spilled chunk fails with INTERNAL naming the chunk, the server keeps
// serving hot chunks, and a checkpoint fails cleanly.
func TestHybridFailedRead(t *testing.T) {
	const n, rows = 20, 2500 // 10 kB chunks
	dir := t.TempDir()
	cfg := testConfig(uniformTable("u", 100, server.MinSize(1)))
	cfg.CheckpointDir = dir
	cfg.Storage = server.StorageConfig{Mode: server.StorageHybrid, MemoryLimitBytes: 25 << 10}
	s := servertest.Start(t, cfg)
	if _, err := os.Stat(filepath.Join(dir, server.SpillDirName, "REVERIE_SPILL")); err != nil {
		t.Fatalf("default spill dir: %v", err)
	}
	insertBig(t, s.Client, "u", n, rows)
	if err := server.CloseSpill(s.Server); err != nil {
		t.Fatal(err)
	}
	_, err := sampleN(ctxT(t), s.Client, "u", 200, 1000)
	wantCode(t, err, codes.Internal, "cannot read chunk data: chunk ")
	_, err = s.Client.Checkpoint(ctxT(t), &reverbpb.CheckpointRequest{})
	wantCode(t, err, codes.Internal, "cannot read chunk data")
	for _, e := range ckptDirEntries(dir) {
		if e.Name() != server.SpillDirName {
			t.Errorf("failed checkpoint left %s", e.Name())
		}
	}
}

// TestHybridFailedReadSendsTheRest: a batch of samples of which some
// cannot be read (their chunks are on a broken disk) still delivers the
// others, then ends with INTERNAL: a queue, whose samples leave the table
// when taken, loses only the unreadable ones.
func TestHybridFailedReadSendsTheRest(t *testing.T) {
	const n, rows = 20, 2500 // 10 kB chunks; about two stay in memory
	cfg := testConfig(server.QueueTable("q", n))
	cfg.Storage = server.StorageConfig{Mode: server.StorageHybrid, MemoryLimitBytes: 25 << 10, Dir: filepath.Join(t.TempDir(), "spill")}
	s := servertest.Start(t, cfg)
	insertBig(t, s.Client, "q", n, rows)
	if err := server.CloseSpill(s.Server); err != nil {
		t.Fatal(err)
	}
	// One request, one batch: all n are taken at once, oldest first.
	entries, err := sampleN(ctxT(t), s.Client, "q", n, 1000)
	wantCode(t, err, codes.Internal, "cannot read chunk data: chunk ")
	delivered := 0
	for _, e := range entries {
		for _, d := range e.GetData() {
			if !proto.Equal(d, bigChunk(d.GetChunkKey(), rows)) {
				t.Fatalf("chunk %d came back different", d.GetChunkKey())
			}
		}
		if e.GetEndOfSequence() {
			delivered++
		}
	}
	st := s.StorageStats()
	if stats, _ := s.TableStats("q"); stats.Deletes != n {
		t.Fatalf("the queue let %d items go, want all %d", stats.Deletes, n)
	}
	if delivered == 0 || int64(delivered)+st.ReadErrors != n {
		t.Fatalf("delivered %d samples and failed %d reads, want every readable one of %d delivered (%+v)",
			delivered, st.ReadErrors, n, st)
	}
}

// TestHybridCheckpointRoundTrip checkpoints a hybrid server whose data is
// mostly on disk and restores it into another hybrid server.
func TestHybridCheckpointRoundTrip(t *testing.T) {
	const n, rows = 50, 2500
	dir := t.TempDir()
	cfg := testConfig(uniformTable("u", 100, server.MinSize(1)))
	cfg.CheckpointDir = dir
	cfg.Storage = server.StorageConfig{Mode: server.StorageHybrid, MemoryLimitBytes: 50 << 10}
	a := servertest.Start(t, cfg)
	insertBig(t, a.Client, "u", n, rows)
	if _, err := a.Client.Checkpoint(ctxT(t), &reverbpb.CheckpointRequest{}); err != nil {
		t.Fatal(err)
	}
	// Another server on the same directories cannot share them.
	if _, err := server.New(cfg); err == nil || !strings.Contains(err.Error(), "in use by another server") {
		t.Fatalf("second server on one checkpoint and spill directory: %v", err)
	}
	// Nor the spill alone.
	cfg2 := cfg
	cfg2.CheckpointDir = t.TempDir()
	cfg2.Storage.Dir = filepath.Join(dir, server.SpillDirName) // the first one's
	if _, err := server.New(cfg2); err == nil || !strings.Contains(err.Error(), "storage.dir") || !strings.Contains(err.Error(), "in use by another server") {
		t.Fatalf("second server on one spill directory: %v", err)
	}
	a.Close()
	cfg.Storage.Dir = filepath.Join(t.TempDir(), "b")
	b := servertest.Start(t, cfg) // restores the checkpoint
	if c, _ := b.ChunkStoreStats(); c != n {
		t.Fatalf("restored %d chunks, want %d", c, n)
	}
	entries, err := sampleN(ctxT(t), b.Client, "u", 3*n, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		for _, d := range e.GetData() {
			if !proto.Equal(d, bigChunk(d.GetChunkKey(), rows)) {
				t.Fatalf("chunk %d came back different", d.GetChunkKey())
			}
		}
	}
}

// TestCancelledSamplersReleaseChunks: in the tiered modes a chunk handed
// to gRPC in a response is pinned until gRPC frees the buffer, which
// gRPC-Go does not always do for a stream that ends abnormally. Samplers
// cancelled with responses queued must still leave nothing pinned: after
// a Reset and a collection the store is empty.
func TestCancelledSamplersReleaseChunks(t *testing.T) {
	for _, mode := range []server.StorageMode{server.StorageDisk, server.StorageHybrid} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := testConfig(uniformTable("r", 10, server.MinSize(1)))
			cfg.Storage = server.StorageConfig{Mode: mode, MemoryLimitBytes: 64 << 20, Dir: t.TempDir()}
			s := servertest.Start(t, cfg)
			ctx := ctxT(t)
			var reqs []*reverbpb.InsertStreamRequest
			for k := uint64(1); k <= 4; k++ {
				reqs = append(reqs, &reverbpb.InsertStreamRequest{
					Chunks: []*reverbpb.ChunkData{chunk(k, k, 10000)}, // 40 kB: handed over, not copied
					Items:  []*reverbpb.PrioritizedItem{item(100+k, "r", 1, k, 0, 1)},
				})
			}
			if _, err := insertAll(ctx, s.Client, reqs...); err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				sctx, cancel := context.WithCancel(ctx)
				st, err := s.Client.SampleStream(sctx)
				if err != nil {
					t.Fatal(err)
				}
				st.Send(&reverbpb.SampleStreamRequest{Table: "r", NumSamples: 200, RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: -1}})
				if i%2 == 0 {
					st.Recv()
				}
				cancel()
			}
			if _, err := s.Client.Reset(ctx, &reverbpb.ResetRequest{Table: "r"}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for handlers("SampleStream") > 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			for {
				runtime.GC() // the cleanup of a buffer gRPC dropped unpins
				n, b := s.ChunkStoreStats()
				if n == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("table reset, no stream open, yet the chunk store holds %d chunks (%d bytes)", n, b)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
