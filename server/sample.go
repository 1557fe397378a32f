package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/table"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	// firstSampleBatch is the size of the first table batch of a request;
	// later batches double, as in Reverb.
	firstSampleBatch = 128
	// maxResponseChunkBytes starts a new response message once the chunks
	// in the current one pass this size, to keep messages bounded.
	maxResponseChunkBytes = 2 << 20
)

// SampleStream implements ReverbService. Requests are served one at a time:
// the next is not read until every sample of the current one was sent.
func (s *Server) SampleStream(stream reverbpb.ReverbService_SampleStreamServer) error {
	ctx := stream.Context()
	reqs := recvLoop(ctx, stream.Recv)
	for {
		var r recvResult[reverbpb.SampleStreamRequest]
		select {
		case r = <-reqs:
		case <-s.closing:
			return toStatus(errShuttingDown)
		}
		if errors.Is(r.err, io.EOF) {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		if err := s.serveSampleRequest(ctx, r.msg, stream.Send); err != nil {
			return toStatus(err)
		}
	}
}

// sampleTimeout turns a request's rate_limiter_timeout into a Table.Sample
// timeout: absent or negative waits forever, 0 does not wait, and a positive
// value is milliseconds. (Reverb's server waits forever on 0; see
// docs/compatibility.md.)
func sampleTimeout(t *reverbpb.Timeout) time.Duration {
	if t == nil || t.GetMilliseconds() < 0 {
		return -1
	}
	return time.Duration(t.GetMilliseconds()) * time.Millisecond
}

// serveSampleRequest serves one SampleStreamRequest, sending exactly
// num_samples samples, or fewer followed by an error.
func (s *Server) serveSampleRequest(ctx context.Context, req *reverbpb.SampleStreamRequest, send func(*reverbpb.SampleStreamResponse) error) error {
	n := req.GetNumSamples()
	if n <= 0 {
		return fmt.Errorf("%w: num_samples: must be > 0, got %d", ErrInvalidRequest, n)
	}
	t, err := s.table("table", req.GetTable())
	if err != nil {
		return err
	}
	timeout := sampleTimeout(req.GetRateLimiterTimeout())
	batch := min(int64(firstSampleBatch), n)
	for remaining := n; remaining > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		samples, err := t.Sample(ctx, int(batch), timeout)
		if err != nil {
			return err
		}
		// Under fsync always, a sample is sent only once its effect
		// (times_sampled, a max_times_sampled delete) is on disk, so a
		// crash cannot make a queue deliver an item twice.
		if err := s.waitDurable(ctx); err != nil {
			for i := range samples {
				samples[i].Unpin()
			}
			return err
		}
		err = sendSamples(t.Name(), samples, send)
		for i := range samples {
			samples[i].Unpin()
		}
		if err != nil {
			return err
		}
		remaining -= int64(len(samples))
		batch = min(2*int64(len(samples)), remaining)
	}
	return nil
}

// sendSamples frames samples into responses: each sample's first entry
// carries its info, its chunks follow in order, and the entry holding its
// last chunk has end_of_sequence. A response is sent once its chunks pass
// maxResponseChunkBytes; a chunk is never split. A chunk whose data cannot
// be read ends the request with an error naming it, after the responses
// already sent.
func sendSamples(tableName string, samples []table.Sampled, send func(*reverbpb.SampleStreamResponse) error) error {
	resp := &reverbpb.SampleStreamResponse{}
	size := 0
	flush := func() error {
		if len(resp.Entries) == 0 {
			return nil
		}
		err := send(resp)
		resp, size = &reverbpb.SampleStreamResponse{}, 0
		return err
	}
	for i := range samples {
		sm := &samples[i]
		entry := &reverbpb.SampleStreamResponse_SampleEntry{Info: sampleInfo(tableName, sm)}
		resp.Entries = append(resp.Entries, entry)
		for j, c := range sm.Item.Chunks {
			data, err := c.Data()
			if err != nil {
				return fmt.Errorf("sampling item %d of table %q: %w", sm.Item.Key, tableName, err)
			}
			entry.Data = append(entry.Data, data)
			size += c.Size()
			if size >= maxResponseChunkBytes && j < len(sm.Item.Chunks)-1 {
				if err := flush(); err != nil {
					return err
				}
				entry = &reverbpb.SampleStreamResponse_SampleEntry{}
				resp.Entries = append(resp.Entries, entry)
			}
		}
		entry.EndOfSequence = true
		if size >= maxResponseChunkBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func sampleInfo(tableName string, sm *table.Sampled) *reverbpb.SampleInfo {
	return &reverbpb.SampleInfo{
		Item: &reverbpb.PrioritizedItem{
			Key:            sm.Item.Key,
			Table:          tableName,
			Priority:       sm.Item.Priority,
			TimesSampled:   sm.Item.TimesSampled,
			InsertedAt:     timestamppb.New(time.Unix(0, sm.Item.InsertedAt)),
			FlatTrajectory: sm.Item.Trajectory,
		},
		Probability: sm.Probability,
		TableSize:   sm.TableSize,
		RateLimited: sm.RateLimited,
	}
}
