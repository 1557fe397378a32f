package pbvalid_test

import (
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/pbvalid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func chunk() *reverbpb.ChunkData {
	return &reverbpb.ChunkData{
		ChunkKey:      7,
		SequenceRange: &reverbpb.SequenceRange{EpisodeId: 3, Start: 1, End: 4},
		Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
			Dtype:         tensorflowpb.DataType_DT_FLOAT,
			TensorShape:   &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: 4, Name: "t"}, {Size: 2}}},
			TensorContent: []byte("0123456789abcdef01234567"),
			FloatVal:      []float32{1, 2},
			Int64Val:      []int64{-1, 1 << 40},
		}}},
		DataTensorsLen: 1,
	}
}

func TestCheck(t *testing.T) {
	good, err := proto.Marshal(chunk())
	if err != nil {
		t.Fatal(err)
	}
	// dim { name: "\xff" } inside data.tensors[0].tensor_shape.
	dim := protowire.AppendTag(nil, 2, protowire.BytesType)
	dim = protowire.AppendBytes(dim, []byte{0xff})
	shape := protowire.AppendTag(nil, 2, protowire.BytesType)
	shape = protowire.AppendBytes(shape, dim)
	tensor := protowire.AppendTag(nil, 2, protowire.BytesType)
	tensor = protowire.AppendBytes(tensor, shape)
	data := protowire.AppendTag(nil, 1, protowire.BytesType)
	data = protowire.AppendBytes(data, tensor)
	badUTF8 := protowire.AppendTag(nil, 5, protowire.BytesType)
	badUTF8 = protowire.AppendBytes(badUTF8, data)

	tests := []struct {
		name string
		b    []byte
		want string // "" for valid, else a substring of the error
	}{
		{"empty", nil, ""},
		{"full", good, ""},
		{"unknown fields", protowire.AppendVarint(protowire.AppendTag(good, 99, protowire.VarintType), 5), ""},
		{"known field in another wire type", protowire.AppendFixed32(protowire.AppendTag(nil, 1, protowire.Fixed32Type), 5), ""},
		{"truncated", good[:len(good)-3], "data"},
		{"field number 0", []byte{0x00, 0x01}, "tag at byte 0"},
		{"bad utf-8 in a proto3 string", badUTF8, "data.tensors.tensor_shape.dim.name: string field contains invalid UTF-8"},
		{"end group alone", protowire.AppendTag(nil, 9, protowire.EndGroupType), "field 9"},
	}
	md := (&reverbpb.ChunkData{}).ProtoReflect().Descriptor()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := pbvalid.Check(md, tc.b)
			if uerr := proto.Unmarshal(tc.b, &reverbpb.ChunkData{}); (uerr == nil) != (err == nil) {
				t.Fatalf("Check: %v, but proto.Unmarshal: %v", err, uerr)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckAllocs(t *testing.T) {
	b, _ := proto.Marshal(chunk())
	md := (&reverbpb.ChunkData{}).ProtoReflect().Descriptor()
	if n := testing.AllocsPerRun(100, func() { _ = pbvalid.Check(md, b) }); n != 0 {
		t.Fatalf("%v allocations per Check, want 0", n)
	}
}

// FuzzCheck: Check fails exactly when proto.Unmarshal fails, for the
// messages the server keeps as bytes and for one with every kind of field.
func FuzzCheck(f *testing.F) {
	b, _ := proto.Marshal(chunk())
	f.Add(b)
	item, _ := proto.Marshal(&reverbpb.PrioritizedItem{Key: 1, Table: "t", Priority: 0.5, FlatTrajectory: &reverbpb.FlatTrajectory{
		Columns: []*reverbpb.FlatTrajectory_Column{{ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: 1, Length: 1}}}},
	}})
	f.Add(item)
	f.Add([]byte{0x0b, 0x0c})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []proto.Message{&reverbpb.ChunkData{}, &reverbpb.InsertStreamRequest{}, &reverbpb.SampleInfo{}} {
			m = m.ProtoReflect().New().Interface()
			uerr := proto.Unmarshal(b, m)
			err := pbvalid.Check(m.ProtoReflect().Descriptor(), b)
			if (uerr == nil) != (err == nil) {
				t.Fatalf("%v: Check: %v, but proto.Unmarshal: %v", descName(m), err, uerr)
			}
		}
	})
}

func descName(m proto.Message) protoreflect.FullName { return m.ProtoReflect().Descriptor().FullName() }

func BenchmarkCheck(b *testing.B) {
	enc, _ := proto.Marshal(chunk())
	v := pbvalid.For((&reverbpb.ChunkData{}).ProtoReflect().Descriptor())
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if err := v.Check(enc); err != nil {
			b.Fatal(err)
		}
	}
}
