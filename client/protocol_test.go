package client

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The tests here feed the client what no correct server sends, through
// fake streams: reverie's and Reverb's servers never do it, so no real
// server can show it.

// sampleStreamAfterEnd is a sample stream whose server ended it after
// sending one response more than was asked for: Send fails with io.EOF
// and RecvMsg still has that response.
type sampleStreamAfterEnd struct {
	reverbpb.ReverbService_SampleStreamClient
}

func (sampleStreamAfterEnd) Send(*reverbpb.SampleStreamRequest) error { return io.EOF }
func (sampleStreamAfterEnd) RecvMsg(any) error                        { return nil }

// TestSamplerSurplusResponse: a request whose Send fails while a surplus
// response is still buffered fails with ErrServer; it used to succeed
// with no samples, leaving the sampler's budget reserved for good (Next
// then blocked until its ctx ended).
func TestSamplerSurplusResponse(t *testing.T) {
	s := &Sampler{table: "t", ctx: context.Background()}
	got, err := s.request(sampleStreamAfterEnd{}, 2, &drainGuard{})
	if got != 0 || !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), "more samples than were requested") {
		t.Fatalf("request = %d, %v; want 0 and ErrServer naming the surplus", got, err)
	}
}

// insertRPC is a server whose InsertStream confirms a request that could
// not be sent.
type insertRPC struct {
	reverbpb.ReverbServiceClient
}

func (insertRPC) InsertStream(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[reverbpb.InsertStreamRequest, reverbpb.InsertStreamResponse], error) {
	return insertStreamAfterEnd{}, nil
}

type insertStreamAfterEnd struct {
	grpc.BidiStreamingClient[reverbpb.InsertStreamRequest, reverbpb.InsertStreamResponse]
}

func (insertStreamAfterEnd) Send(*reverbpb.InsertStreamRequest) error { return io.EOF }
func (insertStreamAfterEnd) Recv() (*reverbpb.InsertStreamResponse, error) {
	return &reverbpb.InsertStreamResponse{Keys: []uint64{1}}, nil
}

// TestInsertNotSent: Insert whose request could not be sent fails, even
// if the server answered; it used to return nil.
func TestInsertNotSent(t *testing.T) {
	c := &Client{rpc: insertRPC{}}
	err := c.Insert(context.Background(), []Tensor{Scalar(float32(1))}, map[string]float64{"t": 1})
	if !errors.Is(err, ErrServer) {
		t.Fatalf("Insert = %v, want ErrServer", err)
	}
}

// TestServerDeadline: a DEADLINE_EXCEEDED the server (or a proxy) sent
// while the caller's ctx is live keeps its code and message, and is still
// context.DeadlineExceeded to errors.Is; the rate limiter's timeout and
// the caller's own deadline are as before.
func TestServerDeadline(t *testing.T) {
	err := fromRPC(context.Background(), status.Error(codes.DeadlineExceeded, "proxy: stream time limit"))
	if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "proxy: stream time limit") {
		t.Errorf("server deadline: %v (code %v)", err, status.Code(err))
	}
	err = fromRPC(context.Background(), status.Error(codes.DeadlineExceeded, "Rate Limiter: Timeout exceeded before the right to sample was acquired."))
	if !errors.Is(err, ErrRateLimiterTimeout) {
		t.Errorf("rate limiter timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fromRPC(ctx, status.Error(codes.Canceled, "x")); err != context.Canceled {
		t.Errorf("caller's ctx: %v, want context.Canceled as it is", err)
	}
}
