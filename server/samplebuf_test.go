package server

import (
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
)

// TestKeepSamples: a stream keeps its samples buffer between batches,
// emptied and holding no chunk, unless it grew past maxKeptSamples.
func TestKeepSamples(t *testing.T) {
	c := chunkstore.New().Insert(&reverbpb.ChunkData{ChunkKey: 1})
	var rb responseBuilder
	s := make([]table.Sampled, 3, 16)
	for i := range s {
		s[i].Item.Chunks = c.List()
	}
	rb.keepSamples(s)
	if len(rb.samples) != 0 || cap(rb.samples) != 16 || &rb.samples[:1][0] != &s[0] {
		t.Fatalf("kept len %d cap %d, want the same memory, empty", len(rb.samples), cap(rb.samples))
	}
	for i, sm := range s {
		if sm.Item.Chunks != nil {
			t.Errorf("sample %d of the kept buffer still names its chunks", i)
		}
	}
	rb.keepSamples(make([]table.Sampled, 1, maxKeptSamples+1))
	if rb.samples != nil {
		t.Errorf("kept a buffer of %d samples, past maxKeptSamples", maxKeptSamples+1)
	}
}

// TestSampleTimeout: rate_limiter_timeout in milliseconds; absent or
// negative waits forever, and so does one too large for a Duration
// (it used to wrap around to a short or negative timeout).
func TestSampleTimeout(t *testing.T) {
	for _, tc := range []struct {
		t    *reverbpb.Timeout
		want time.Duration
	}{
		{nil, -1},
		{&reverbpb.Timeout{Milliseconds: -5}, -1},
		{&reverbpb.Timeout{Milliseconds: 0}, 0},
		{&reverbpb.Timeout{Milliseconds: 1500}, 1500 * time.Millisecond},
		{&reverbpb.Timeout{Milliseconds: 1 << 62}, -1},
		{&reverbpb.Timeout{Milliseconds: 18_446_744_073_710}, -1}, // wrapped to 0.45 ms before
	} {
		if got := sampleTimeout(tc.t); got != tc.want {
			t.Errorf("sampleTimeout(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
}
