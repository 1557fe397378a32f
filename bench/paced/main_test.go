package main

import (
	"math/rand/v2"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"google.golang.org/protobuf/proto"
)

// TestCountResponse checks countResponse against proto.Unmarshal on random
// responses, and that it rejects truncated ones.
func TestCountResponse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		resp := &reverbpb.SampleStreamResponse{}
		for e := r.IntN(20); e > 0; e-- {
			entry := &reverbpb.SampleStreamResponse_SampleEntry{EndOfSequence: r.IntN(3) > 0}
			if r.IntN(2) == 0 {
				entry.Info = &reverbpb.SampleInfo{Item: &reverbpb.PrioritizedItem{Key: r.Uint64(), Table: "t"}, Probability: 0.5}
			}
			for c := r.IntN(3); c > 0; c-- {
				content := make([]byte, r.IntN(300))
				entry.Data = append(entry.Data, &reverbpb.ChunkData{
					ChunkKey: r.Uint64(),
					Data:     &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{Dtype: tensorflowpb.DataType_DT_FLOAT, TensorContent: content}}},
				})
			}
			resp.Entries = append(resp.Entries, entry)
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var want responseCount
		for _, e := range resp.Entries {
			for _, c := range e.Data {
				want.bytes += int64(proto.Size(c.Data))
			}
			if e.EndOfSequence {
				want.samples++
			}
		}
		var got responseCount
		if err := countResponse(b, &got); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("response %d: counted %+v, want %+v", i, got, want)
		}
		if len(b) > 1 {
			if err := countResponse(b[:len(b)-1], &got); err == nil {
				t.Fatalf("response %d truncated by one byte: accepted", i)
			}
		}
	}
}
