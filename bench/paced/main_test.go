package main

import (
	"math/rand/v2"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"google.golang.org/grpc/mem"
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
		if got.samples != want.samples || got.bytes != want.bytes {
			t.Fatalf("response %d: counted %d samples, %d bytes; want %d, %d", i, got.samples, got.bytes, want.samples, want.bytes)
		}
		if len(b) > 1 {
			if err := countResponse(b[:len(b)-1], &got); err == nil {
				t.Fatalf("response %d truncated by one byte: accepted", i)
			}
		}
	}
}

// TestCountCodec checks that the codec counts a response that arrives in
// several of the transport's buffers as it counts the joined bytes, and
// that its requests are plain protobuf.
func TestCountCodec(t *testing.T) {
	resp := &reverbpb.SampleStreamResponse{}
	for i := range 3 {
		resp.Entries = append(resp.Entries, &reverbpb.SampleStreamResponse_SampleEntry{
			EndOfSequence: true,
			Data: []*reverbpb.ChunkData{{ChunkKey: uint64(i), Data: &reverbpb.ChunkData_Data{
				Tensors: []*tensorflowpb.TensorProto{{TensorContent: make([]byte, 40_000)}}}}},
		})
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var want responseCount
	if err := countResponse(b, &want); err != nil {
		t.Fatal(err)
	}
	if want.samples != 3 || want.bytes < 120_000 {
		t.Fatalf("countResponse: %+v", want)
	}
	var data mem.BufferSlice
	for rest := b; len(rest) > 0; {
		n := min(len(rest), 16<<10)
		data = append(data, mem.SliceBuffer(rest[:n]))
		rest = rest[n:]
	}
	// Twice into one count, as a stream does: the second must not add to
	// the first, and reuses the scratch buffer.
	var got responseCount
	for range 2 {
		if err := (countCodec{}).Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if got.samples != want.samples || got.bytes != want.bytes {
			t.Fatalf("Unmarshal of %d buffers counted %d samples, %d bytes; want %d, %d",
				len(data), got.samples, got.bytes, want.samples, want.bytes)
		}
	}
	var one responseCount
	if err := (countCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &one); err != nil {
		t.Fatal(err)
	}
	if one.samples != want.samples || one.bytes != want.bytes || one.scratch != nil {
		t.Fatalf("Unmarshal of one buffer counted %d samples, %d bytes (scratch %d); want %d, %d, none",
			one.samples, one.bytes, len(one.scratch), want.samples, want.bytes)
	}
	if err := (countCodec{}).Unmarshal(data, &reverbpb.SampleStreamResponse{}); err == nil {
		t.Fatal("Unmarshal into a SampleStreamResponse: no error")
	}

	req := &reverbpb.SampleStreamRequest{Table: "t", NumSamples: 16}
	enc, err := (countCodec{}).Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back reverbpb.SampleStreamRequest
	if err := proto.Unmarshal(enc.Materialize(), &back); err != nil || !proto.Equal(&back, req) {
		t.Fatalf("Marshal: decoded %v (%v), want %v", &back, err, req)
	}
}
