package server

import (
	"context"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"google.golang.org/protobuf/proto"
)

// SetCheckpointHook makes s call f at each stage of writing a checkpoint:
// "snapshot" (every table's snapshot begun, nothing copied), "captured"
// (a table's pages all copied), "item" (its first item written),
// "table-end". Set it before the Checkpoint calls it should see.
func SetCheckpointHook(s *Server, f func(stage, table string)) {
	// Checkpoint goroutines start under ckpt.mu, which orders this write
	// before their reads.
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	s.hooks.checkpoint = f
}

// SetSnapshotDownloadHook makes every server call f with the name of the
// remote snapshot it is about to download at start, until restore is
// called.
func SetSnapshotDownloadHook(f func(name string)) (restore func()) {
	beforeSnapshotDownload = f
	return func() { beforeSnapshotDownload = nil }
}

// PullAttempts is how many times a server looks for a remote snapshot
// that went away before its download.
const PullAttempts = pullAttempts

// CheckpointWaiters is the number of Checkpoint calls waiting for the next
// checkpoint while one is written.
func CheckpointWaiters(s *Server) int {
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	if s.ckpt.next == nil {
		return 0
	}
	return s.ckpt.next.waiters
}

// CheckpointCancelled is closed once s abandons checkpoints being written
// (Close, or a Shutdown whose context ended).
func CheckpointCancelled(s *Server) <-chan struct{} { return s.bgCtx.Done() }

// CloseSpill closes s's spill under its chunk store, so that cold reads
// fail as a broken disk would make them.
func CloseSpill(s *Server) error { return s.storage.spill.Close() }

func init() {
	// Tests catch any use of one of gRPC's read buffers after it was freed.
	transportPool.Poison = true
}

func init() {
	// Tests catch any read of a chunk's bytes after its buffer was given
	// back for reuse.
	chunkstore.PoisonRecycled = true
}

// ChunkFreeStats reports the reuse of s's chunk buffers.
func ChunkFreeStats(s *Server) chunkstore.FreeStats { return s.chunks.FreeStats() }

// MaxSampleBatch bounds the samples a request takes from a table at once.
const MaxSampleBatch = maxSampleBatch

// ServeSampleRequest serves req on s as a SampleStream would, handing each
// response to send, decoded, in place of the stream: send runs before the
// server takes its next batch.
func ServeSampleRequest(ctx context.Context, s *Server, req *reverbpb.SampleStreamRequest, send func(*reverbpb.SampleStreamResponse) error) error {
	var rb responseBuilder
	return s.serveSampleRequest(ctx, req, &rb, func(m *rawMessage) error {
		b := m.data.Materialize()
		m.data.Free()
		resp := new(reverbpb.SampleStreamResponse)
		if err := proto.Unmarshal(b, resp); err != nil {
			return err
		}
		return send(resp)
	})
}
