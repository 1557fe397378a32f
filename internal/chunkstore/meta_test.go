package chunkstore

import (
	"math"
	"slices"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func shapedTensor(dims ...int64) *tensorflowpb.TensorProto {
	t := &tensorflowpb.TensorProto{Dtype: tensorflowpb.DataType_DT_FLOAT, TensorShape: &tensorflowpb.TensorShapeProto{}}
	for _, d := range dims {
		t.TensorShape.Dim = append(t.TensorShape.Dim, &tensorflowpb.TensorShapeProto_Dim{Size: d})
	}
	return t
}

func TestParseMeta(t *testing.T) {
	full := &reverbpb.ChunkData{
		ChunkKey:      math.MaxUint64,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: 12, Start: 3, End: 9},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{
			shapedTensor(7, 2), shapedTensor(), shapedTensor(-1, 3), {}, shapedTensor(0),
		}},
		DeprecatedData: []*tensorflowpb.TensorProto{shapedTensor(99)},
	}
	enc := mustMarshal(t, full)
	// Occurrences of a message field merge; the last scalar wins.
	merged := protowire.AppendTag(slices.Clone(enc), 2, protowire.BytesType)
	merged = protowire.AppendBytes(merged, mustMarshal(t, &reverbpb.SequenceRange{EpisodeId: 13}))
	merged = protowire.AppendTag(merged, 5, protowire.BytesType)
	merged = protowire.AppendBytes(merged, mustMarshal(t, &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{shapedTensor(4)}}))
	merged = protowire.AppendVarint(protowire.AppendTag(merged, 1, protowire.VarintType), 5)

	for name, b := range map[string][]byte{"empty": nil, "full": enc, "merged": merged} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMeta(b)
			if err != nil {
				t.Fatal(err)
			}
			checkMeta(t, b, got)
		})
	}
	if _, err := ParseMeta(enc[:len(enc)-1]); err == nil {
		t.Fatal("ParseMeta of a truncated chunk: no error")
	}
}

// checkMeta compares m with the metadata of b decoded.
func checkMeta(t *testing.T, b []byte, m Meta) {
	t.Helper()
	d := &reverbpb.ChunkData{}
	if err := proto.Unmarshal(b, d); err != nil {
		t.Fatal(err)
	}
	want := MetaOf(d)
	if m.Key != want.Key || m.Episode != want.Episode || !slices.Equal(m.Rows, want.Rows) {
		t.Fatalf("ParseMeta = %+v, decoded = %+v", m, want)
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParseMeta: on every valid encoding, ParseMeta agrees with decoding.
func FuzzParseMeta(f *testing.F) {
	f.Add(mustMarshal(f, payloadChunk(3, 16)))
	f.Add(mustMarshal(f, &reverbpb.ChunkData{Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{shapedTensor(-2, 1), shapedTensor(5)}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeta(b)
		if proto.Unmarshal(b, &reverbpb.ChunkData{}) != nil {
			return
		}
		if err != nil {
			t.Fatalf("ParseMeta of a valid chunk: %v", err)
		}
		checkMeta(t, b, m)
	})
}

// BenchmarkParseMeta parses the chunk of a 400 B insert (one float32
// tensor of shape [1, 100], Snappy-sized content).
func BenchmarkParseMeta(b *testing.B) {
	tensor := shapedTensor(1, 100)
	tensor.TensorContent = make([]byte, 405)
	enc, err := proto.Marshal(&reverbpb.ChunkData{
		ChunkKey:       1 << 60,
		SequenceRange:  &reverbpb.SequenceRange{EpisodeId: 1 << 61, Start: 7, End: 7},
		Data:           &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{tensor}},
		DataTensorsLen: 1,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMeta(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseMetaSharedRows checks that the rows of one-tensor chunks, which
// share storage, are right, and that a second tensor does not write into
// that storage.
func TestParseMetaSharedRows(t *testing.T) {
	for _, tc := range []struct {
		tensors []*tensorflowpb.TensorProto
		want    []int64
	}{
		{[]*tensorflowpb.TensorProto{shapedTensor(3, 16)}, []int64{3}},
		{[]*tensorflowpb.TensorProto{shapedTensor()}, []int64{-1}},
		{[]*tensorflowpb.TensorProto{shapedTensor(255)}, []int64{255}},
		{[]*tensorflowpb.TensorProto{shapedTensor(256)}, []int64{256}},
		{[]*tensorflowpb.TensorProto{shapedTensor(3), shapedTensor(7)}, []int64{3, 7}},
		{[]*tensorflowpb.TensorProto{shapedTensor(3), shapedTensor(9), shapedTensor(1)}, []int64{3, 9, 1}},
	} {
		b := mustMarshal(t, &reverbpb.ChunkData{Data: &reverbpb.ChunkData_Data{Tensors: tc.tensors}})
		m, err := ParseMeta(b)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.Rows, tc.want) {
			t.Fatalf("Rows = %v, want %v", m.Rows, tc.want)
		}
	}
	for i, r := range oneRow {
		if r != int64(i)-1 {
			t.Fatalf("the shared rows were written: oneRow[%d] = %d", i, r)
		}
	}
}
