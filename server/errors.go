package server

import (
	"context"
	"errors"

	"github.com/reverie-rl/reverie/internal/checkpoint"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
	"github.com/reverie-rl/reverie/internal/wal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors the service reports. Each is wrapped with the request field it
// concerns; toStatus turns them into gRPC status codes.
var (
	// ErrServerClosed is returned by Serve after Shutdown or Close.
	ErrServerClosed = errors.New("server: closed")
	// ErrTableNotFound: a request names a table the server does not have.
	ErrTableNotFound = errors.New("server: table not found")
	// ErrInvalidRequest: a request is malformed.
	ErrInvalidRequest = errors.New("server: invalid request")
	// ErrChunkNotHeld: an item or keep_chunk_keys names a chunk the stream
	// does not hold.
	ErrChunkNotHeld = errors.New("server: chunk not held")
	// ErrNoCheckpointDir: Checkpoint was called with no directory configured.
	ErrNoCheckpointDir = errors.New("server: no checkpoint directory configured")
	// ErrRestore is wrapped by every error New returns because a checkpoint
	// could not be restored.
	ErrRestore = errors.New("server: cannot restore checkpoint")
	// ErrCheckpointCorrupt is wrapped (with ErrRestore) when the checkpoint
	// file is damaged or truncated: a checksum, a count or the structure
	// did not check out. Nothing was restored.
	ErrCheckpointCorrupt = checkpoint.ErrCorrupt
	// errShuttingDown ends open streams when the server drains.
	errShuttingDown = errors.New("server: shutting down")
)

// rateLimiterTimeoutMessage is the exact text Reverb clients look for (with
// DEADLINE_EXCEEDED) to tell a rate limiter timeout from other errors.
const rateLimiterTimeoutMessage = "Rate Limiter: Timeout exceeded before the right to insert was acquired."

// toStatus converts an error from the service or the tables into a gRPC
// status error. It is the only place that chooses codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var code codes.Code
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, table.ErrRateLimiterTimeout):
		return status.Error(codes.DeadlineExceeded, rateLimiterTimeoutMessage)
	case errors.Is(err, ErrTableNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, table.ErrInvalidPriority), errors.Is(err, table.ErrInvalidItem):
		code = codes.InvalidArgument
	case errors.Is(err, ErrChunkNotHeld), errors.Is(err, ErrNoCheckpointDir):
		code = codes.FailedPrecondition
	case errors.Is(err, table.ErrClosed), errors.Is(err, errShuttingDown), errors.Is(err, wal.ErrClosed), errors.Is(err, chunkstore.ErrClosed):
		// Clients retry UNAVAILABLE: writers re-send unconfirmed items.
		code = codes.Unavailable
	case errors.Is(err, ErrSnapshotUpload):
		// The bucket may be back when the call is made again.
		code = codes.Unavailable
	default:
		// Including chunkstore.ErrRead (the spill failed a read: the
		// message names the chunk) and chunkstore.ErrReleased (a bug).
		code = codes.Internal
	}
	return status.Error(code, err.Error())
}
