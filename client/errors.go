package client

import (
	"context"
	"errors"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors returned by the client. Every error from a call wraps one of them
// (test with errors.Is) together with the server's message, except the
// context's errors: the caller's ctx ending returns ctx.Err(), and a
// DEADLINE_EXCEEDED from the server (or a proxy) that is not the rate
// limiter's is an *Error wrapping context.DeadlineExceeded.
var (
	// ErrTableNotFound: the server has no table of that name.
	ErrTableNotFound = errors.New("client: table not found")
	// ErrInvalidArgument: the server or the client rejected a request.
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrFailedPrecondition: the request needs state the server lacks, such
	// as a chunk it does not hold or a checkpoint directory.
	ErrFailedPrecondition = errors.New("client: failed precondition")
	// ErrRateLimiterTimeout: a sample waited longer than its
	// rate_limiter_timeout.
	ErrRateLimiterTimeout = errors.New("client: rate limiter timeout")
	// ErrUnavailable: the server cannot be reached or is shutting down;
	// retrying later may succeed.
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrUnauthenticated: the server wants a bearer token (WithToken) and
	// got none, or one it does not accept.
	ErrUnauthenticated = errors.New("client: unauthenticated")
	// ErrClosed: the client, writer or sampler was closed.
	ErrClosed = errors.New("client: closed")
	// ErrServer: any other failure reported by the server.
	ErrServer = errors.New("client: server error")
)

// rateLimiterTimeoutText is what Reverb-compatible servers put in a
// DEADLINE_EXCEEDED status when the rate limiter timed out.
const rateLimiterTimeoutText = "Rate Limiter: Timeout exceeded"

// Error is a failed call: the sentinel it wraps, the gRPC code and the
// server's message.
type Error struct {
	Sentinel error
	Code     codes.Code
	Msg      string
}

func (e *Error) Error() string {
	return e.Sentinel.Error() + ": " + e.Msg
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Sentinel }

// GRPCStatus returns the status the server sent.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

// fromRPC maps an error from a gRPC call to the client's errors. Context
// errors (the caller's ctx ended) pass through unchanged; it is the only
// place that interprets status codes.
func fromRPC(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var sentinel error
	switch st.Code() {
	case codes.NotFound:
		sentinel = ErrTableNotFound
	case codes.InvalidArgument:
		sentinel = ErrInvalidArgument
	case codes.FailedPrecondition:
		sentinel = ErrFailedPrecondition
	case codes.DeadlineExceeded:
		if strings.Contains(st.Message(), rateLimiterTimeoutText) {
			sentinel = ErrRateLimiterTimeout
		} else {
			// The caller's ctx has not ended (above), so a deadline
			// of the server's or of a proxy on the way: it is still
			// context.DeadlineExceeded to errors.Is, but keeps its
			// code and message, so that it says who gave up.
			sentinel = context.DeadlineExceeded
		}
	case codes.Unavailable, codes.Canceled:
		sentinel = ErrUnavailable
	case codes.Unauthenticated:
		sentinel = ErrUnauthenticated
	default:
		sentinel = ErrServer
	}
	return &Error{Sentinel: sentinel, Code: st.Code(), Msg: st.Message()}
}

// retryable reports whether a stream that failed with err should be
// reopened: UNAVAILABLE and CANCELLED from the server mean "try again", as
// for Reverb's writers and samplers.
func retryable(err error) bool {
	return errors.Is(err, ErrUnavailable)
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
