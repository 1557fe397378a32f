package client

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"google.golang.org/protobuf/proto"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
)

// unhex decodes a hex string, ignoring spaces.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Golden vectors, derived by hand.
//
// Snappy block format: varint(uncompressed length), then elements. A
// literal of n <= 60 bytes is the tag byte (n-1)<<2 followed by the n bytes.
// Both Snappy implementations emit a single literal when the input has no
// repeated 4-byte sequence (nothing to copy) or is shorter than 15 bytes, so
// the inputs below are chosen that way and the compressed bytes are fixed.
//
// TensorProto wire bytes (fields in number order):
//
//	08 <dtype>                          field 1, varint
//	12 <len> { 12 <len> { 08 <size> } } field 2 tensor_shape { dim { size } };
//	                                     a size of 0 is omitted (proto3), so a
//	                                     zero dim is "12 00" and a scalar's
//	                                     shape is the empty message "12 00"
//	22 <len> <content>                  field 4 tensor_content
var goldens = []struct {
	name    string
	tensor  func(t *testing.T) Tensor
	delta   bool
	content string // tensor_content
	wire    string // the whole TensorProto
}{
	{
		// float32 [2] {1.0, -2.5}: 1.0 = 0x3f800000, -2.5 = 0xc0200000;
		// little-endian 00 00 80 3f | 00 00 20 c0. 8 bytes -> varint 08,
		// literal tag (8-1)<<2 = 0x1c.
		name:    "float32[2]",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromSlice([]float32{1, -2.5}, 2)) },
		content: "08 1c 0000803f 000020c0",
		wire:    "08 01 12 04 12 02 08 02 22 0a 08 1c 0000803f 000020c0",
	},
	{
		// int32 [3,2] {{1,2},{4,8},{2,16}}, delta: rows become
		// {1,2}, {4-1, 8-2} = {3,6}, {2-4, 16-8} = {-2, 8}; -2 = 0xfffffffe.
		// 24 bytes, no repeated 4-byte window -> varint 0x18,
		// tag (24-1)<<2 = 0x5c.
		name:    "int32[3,2] delta",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromSlice([]int32{1, 2, 4, 8, 2, 16}, 3, 2)) },
		delta:   true,
		content: "18 5c 01000000 02000000 03000000 06000000 feffffff 08000000",
		wire: "08 03 12 08 12 02 08 03 12 02 08 02 " +
			"22 1a 18 5c 01000000 02000000 03000000 06000000 feffffff 08000000",
	},
	{
		// uint8 [2,2] {{250, 0}, {3, 255}}, delta in uint8 with wrap-around:
		// 3-250 = -247 = 9 (mod 256), 255-0 = 255. Bytes fa 00 09 ff ->
		// varint 04, tag (4-1)<<2 = 0x0c.
		name:    "uint8[2,2] delta wrap",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromSlice([]uint8{250, 0, 3, 255}, 2, 2)) },
		delta:   true,
		content: "04 0c fa 00 09 ff",
		wire:    "08 04 12 08 12 02 08 02 12 02 08 02 22 06 04 0c fa 00 09 ff",
	},
	{
		// int8 [2,1] {{100}, {-100}}, delta in uint8: 0x9c - 0x64 = 0x38 (56).
		name:    "int8[2,1] delta",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromSlice([]int8{100, -100}, 2, 1)) },
		delta:   true,
		content: "02 04 64 38",
		wire:    "08 06 12 08 12 02 08 02 12 02 08 01 22 04 02 04 64 38",
	},
	{
		// bool [3] {true, false, true}: one byte each 01 00 01 -> varint 03,
		// tag (3-1)<<2 = 0x08. Delta never applies to bool.
		name:    "bool[3]",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromBools([]bool{true, false, true}, 3)) },
		delta:   true,
		content: "03 08 01 00 01",
		wire:    "08 0a 12 04 12 02 08 03 22 05 03 08 01 00 01",
	},
	{
		// DT_STRING [2] {"ab", ""}: not compressed; all varint32 lengths
		// first (02, 00), then all bytes ("ab" = 61 62).
		name:    "string[2]",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromStrings([]string{"ab", ""}, 2)) },
		content: "02 00 61 62",
		wire:    "08 07 12 04 12 02 08 02 22 04 02 00 61 62",
	},
	{
		// int64 [3] (rows are scalars, rank 1): delta is flagged but not
		// applied. Values 0x0807060504030201, 0x1817161514131211,
		// 0x2827262524232221 -> 24 distinct bytes, stored as-is.
		name: "int64[3] rank1 no delta",
		tensor: func(t *testing.T) Tensor {
			return Vector([]int64{0x0807060504030201, 0x1817161514131211, 0x2827262524232221})
		},
		delta:   true,
		content: "18 5c 0102030405060708 1112131415161718 2122232425262728",
		wire: "08 09 12 04 12 02 08 03 " +
			"22 1a 18 5c 0102030405060708 1112131415161718 2122232425262728",
	},
	{
		// int32 scalar 7: shape present but empty ("12 00"); 07 00 00 00 ->
		// varint 04, tag 0x0c.
		name:    "int32 scalar",
		tensor:  func(t *testing.T) Tensor { return Scalar(int32(7)) },
		content: "04 0c 07000000",
		wire:    "08 03 12 00 22 06 04 0c 07000000",
	},
	{
		// float32 [0,3]: no data; Snappy of the empty input is the single
		// varint 00. The zero dim serialises as an empty Dim ("12 00").
		name:    "float32[0,3] empty",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromSlice([]float32{}, 0, 3)) },
		content: "00",
		wire:    "08 01 12 06 12 00 12 02 08 03 22 01 00",
	},
	{
		// DT_STRING [0]: TensorFlow writes no content at all; the zero dim is
		// an empty Dim "12 00" inside a 2-byte shape.
		name:    "string[0] empty",
		tensor:  func(t *testing.T) Tensor { return mustT(t)(FromStrings(nil, 0)) },
		content: "",
		wire:    "08 07 12 02 12 00",
	},
}

func TestGoldenVectors(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			x := g.tensor(t)
			p, err := EncodeTensor(x, g.delta)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := p.GetTensorContent(), unhex(t, g.content); !bytes.Equal(got, want) {
				t.Errorf("tensor_content = % x\nwant             % x", got, want)
			}
			if got, want := marshal(t, p), unhex(t, g.wire); !bytes.Equal(got, want) {
				t.Errorf("wire = % x\nwant   % x", got, want)
			}
			// Decoding the golden wire bytes gives the tensor back.
			var q tensorflowpb.TensorProto
			if err := proto.Unmarshal(unhex(t, g.wire), &q); err != nil {
				t.Fatal(err)
			}
			back, err := DecodeTensor(&q, g.delta)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Equal(x) {
				t.Errorf("decoded %+v, want %+v", back, x)
			}
		})
	}
}

// The golden literals do not depend on our Snappy encoder: the official
// decoder accepts them too.
func TestGoldenSnappyDecodes(t *testing.T) {
	got, err := snappy.Decode(nil, unhex(t, "08 1c 0000803f 000020c0"))
	if err != nil || !bytes.Equal(got, unhex(t, "0000803f 000020c0")) {
		t.Fatalf("% x, %v", got, err)
	}
}

func TestDeltaNotAppliedWithoutFlag(t *testing.T) {
	x := mustT(t)(FromSlice([]uint8{250, 0, 3, 255}, 2, 2))
	p, err := EncodeTensor(x, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "04 0c fa 00 03 ff"); !bytes.Equal(p.TensorContent, want) {
		t.Fatalf("% x, want % x", p.TensorContent, want)
	}
	// Decoding with the wrong flag gives the stored deltas back unchanged
	// for rank-2 integer tensors: that is the reader's job to avoid.
	d, err := DecodeTensor(p, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Data, []byte{250, 0, 253, 255}) {
		t.Fatalf("% x", d.Data)
	}
	// The input tensor is never modified by delta encoding.
	if _, err := EncodeTensor(x, true); err != nil || !bytes.Equal(x.Data, []byte{250, 0, 3, 255}) {
		t.Fatalf("input modified: % x, %v", x.Data, err)
	}
}

func TestDeltaApplies(t *testing.T) {
	for _, dt := range []DType{DTInt8, DTUint8, DTInt16, DTUint16, DTInt32, DTUint32, DTInt64, DTUint64} {
		if !deltaApplies(dt, 2) || !deltaApplies(dt, 4) || deltaApplies(dt, 1) || deltaApplies(dt, 0) {
			t.Errorf("%v", dt)
		}
	}
	for _, dt := range []DType{DTFloat, DTDouble, DTBool, DTHalf, DTBFloat16, DTComplex64, DTString, DTQInt8, DTQInt32, DTInt4} {
		if deltaApplies(dt, 2) {
			t.Errorf("%v", dt)
		}
	}
}

func TestDeltaWrapAround(t *testing.T) {
	must := mustT(t)
	cases := []Tensor{
		must(FromSlice([]int16{math.MaxInt16, math.MinInt16, math.MinInt16, math.MaxInt16}, 2, 2)),
		must(FromSlice([]uint16{0, 65535, 65535, 0}, 2, 2)),
		must(FromSlice([]int32{math.MinInt32, math.MaxInt32, math.MaxInt32, math.MinInt32}, 2, 2)),
		must(FromSlice([]uint32{0, 1, math.MaxUint32, 0}, 2, 2)),
		must(FromSlice([]int64{math.MinInt64, math.MaxInt64, math.MaxInt64, math.MinInt64}, 2, 1, 2)),
		must(FromSlice([]uint64{1, math.MaxUint64, 0, 2}, 2, 2)),
	}
	for _, x := range cases {
		p, err := EncodeTensor(x, true)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeTensor(p, true)
		if err != nil || !back.Equal(x) {
			t.Fatalf("%v: %+v, %v", x.DType, back, err)
		}
	}
	// uint64: {1, max} then {0, 2}: deltas 0-1 = max, 2-max = 3.
	raw := bytes.Clone(cases[5].Data)
	deltaEncodeInPlace(raw, 8, 16)
	want, _ := FromSlice([]uint64{1, math.MaxUint64, math.MaxUint64, 3}, 2, 2)
	if !bytes.Equal(raw, want.Data) {
		t.Fatalf("% x", raw)
	}
}

// randomTensor returns a tensor of dtype dt and the given shape with
// pseudo-random contents.
func randomTensor(r *rand.Rand, dt DType, shape ...int64) Tensor {
	n, _ := shapeElements(shape)
	if dt == DTString {
		strs := make([][]byte, n)
		for i := range strs {
			l := r.IntN(6)
			if i == 1 {
				l = 300 // needs a 2-byte varint length
			}
			strs[i] = make([]byte, l)
			for j := range strs[i] {
				strs[i][j] = byte(r.Uint32())
			}
		}
		return Tensor{DType: dt, Shape: shape, Strings: strs}
	}
	size, _ := DTypeSize(dt)
	data := make([]byte, int(n)*size)
	for i := range data {
		data[i] = byte(r.Uint32())
		if dt == DTBool {
			data[i] &= 1
		}
	}
	return Tensor{DType: dt, Shape: shape, Data: data}
}

var allDTypes = []DType{DTFloat, DTDouble, DTInt32, DTUint8, DTInt16, DTInt8, DTString, DTComplex64,
	DTInt64, DTBool, DTQInt8, DTQUint8, DTQInt32, DTBFloat16, DTQInt16, DTQUint16, DTUint16,
	DTComplex128, DTHalf, DTUint32, DTUint64, DTFloat8E5M2, DTFloat8E4M3FN, DTInt4, DTUint4}

func TestRoundTripAllDTypes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][]int64{nil, {1}, {5}, {4, 3}, {3, 2, 2}, {0}, {0, 4}, {3, 0}, {200, 7}}
	for _, dt := range allDTypes {
		for _, shape := range shapes {
			for _, delta := range []bool{false, true} {
				x := randomTensor(r, dt, shape...)
				p, err := EncodeTensor(x, delta)
				if err != nil {
					t.Fatalf("%v%v: %v", dt, shape, err)
				}
				// Through the wire too.
				var q tensorflowpb.TensorProto
				if err := proto.Unmarshal(marshal(t, p), &q); err != nil {
					t.Fatal(err)
				}
				back, err := DecodeTensor(&q, delta)
				if err != nil {
					t.Fatalf("%v%v delta=%v: %v", dt, shape, delta, err)
				}
				if !back.Equal(x) {
					t.Fatalf("%v%v delta=%v: round trip differs", dt, shape, delta)
				}
				if err := back.Validate(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func TestRoundTripTypedConstructors(t *testing.T) {
	must := mustT(t)
	long := strings.Repeat("x", 200)
	ts := []Tensor{
		must(FromSlice([]float32{1, float32(math.Inf(-1)), float32(math.NaN()), 0}, 2, 2)),
		must(FromSlice([]float64{math.Pi, math.Copysign(0, -1)}, 2, 1)),
		must(FromSlice([]complex64{complex(1, 2), complex(-3, 4)}, 2, 1)),
		must(FromSlice([]complex128{complex(1, 2), complex(-3, 4)}, 1, 2)),
		must(FromFloat16Bits([]uint16{0x3c00, 0x7c00, 0xfc00, 0x7e00}, 2, 2)),
		must(FromBFloat16Bits([]uint16{0x3f80, 0x4049}, 2, 1)),
		must(FromBools([]bool{true, false, false, true}, 2, 2)),
		must(FromStrings([]string{"", long, "héllo", "\x00\xff"}, 2, 2)),
	}
	for _, x := range ts {
		for _, delta := range []bool{false, true} {
			p, err := EncodeTensor(x, delta)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeTensor(p, delta)
			if err != nil || !back.Equal(x) {
				t.Fatalf("%v: %v", x.DType, err)
			}
		}
	}
	// The 200-byte element needs a two-byte varint: 200 = 0xc8 0x01.
	p, err := EncodeTensor(ts[len(ts)-1], false)
	if err != nil {
		t.Fatal(err)
	}
	wantHead := unhex(t, "00 c8 01 06 02")
	if !bytes.Equal(p.TensorContent[:5], wantHead) || len(p.TensorContent) != 5+200+6+2 {
		t.Fatalf("string list head % x, len %d", p.TensorContent[:5], len(p.TensorContent))
	}
}

func TestEncodeErrors(t *testing.T) {
	bad := []Tensor{
		{},                                     // DT_INVALID
		{DType: 20, Data: []byte{1}},           // DT_RESOURCE
		{DType: 21, Data: []byte{1}},           // DT_VARIANT
		{DType: DTFloat, Data: []byte{1}},      // short
		{DType: DTString, Shape: []int64{2}},   // missing strings
		{DType: DTInt32, Shape: []int64{-1}},   // negative dim
		{DType: 101, Shape: nil, Data: nil},    // reference type
		{DType: DTDouble, Shape: []int64{1}},   // missing data
		{DType: DTBool, Strings: [][]byte{{}}}, // strings on a bool
	}
	for i, x := range bad {
		if _, err := EncodeTensor(x, false); err == nil {
			t.Errorf("case %d: EncodeTensor(%+v) succeeded", i, x)
		}
	}
}

func shapeOf(dims ...int64) *tensorflowpb.TensorShapeProto { return shapeToProto(dims) }

func TestDecodeErrors(t *testing.T) {
	valid := func(dt DType, content []byte, dims ...int64) *tensorflowpb.TensorProto {
		return &tensorflowpb.TensorProto{Dtype: dt, TensorShape: shapeOf(dims...), TensorContent: content}
	}
	cases := map[string]*tensorflowpb.TensorProto{
		"nil":                 nil,
		"invalid dtype":       valid(0, []byte{0}),
		"resource":            valid(20, []byte{0}),
		"variant":             valid(21, []byte{0}),
		"unknown dtype":       valid(999, []byte{0}),
		"ref dtype":           valid(101, []byte{4, 0x0c, 1, 2, 3, 4}),
		"unknown rank":        {Dtype: DTFloat, TensorShape: &tensorflowpb.TensorShapeProto{UnknownRank: true}},
		"unknown dim":         valid(DTFloat, []byte{0}, -1),
		"overflowing shape":   valid(DTFloat, []byte{0}, 1<<40, 1<<40),
		"bytes overflow":      valid(DTComplex128, []byte{0}, 1<<62),
		"corrupt snappy":      valid(DTFloat, unhex(t, "08 ff 00 00 80 3f 00 00 20 c0"), 2),
		"bad snappy header":   valid(DTFloat, unhex(t, "ff ff ff ff ff ff"), 2),
		"snappy too short":    valid(DTFloat, unhex(t, "08 1c 00 00 80 3f"), 2),
		"wrong size":          valid(DTFloat, snappy.Encode(nil, make([]byte, 8)), 3),
		"wrong size larger":   valid(DTFloat, snappy.Encode(nil, make([]byte, 16)), 3),
		"expansion bomb":      valid(DTUint8, unhex(t, "ff ff ff ff 0f 00"), 1<<32-1),
		"float8 no content":   valid(DTFloat8E5M2, nil, 2),
		"fill limit":          {Dtype: DTFloat, TensorShape: shapeOf(1 << 30), FloatVal: []float32{1}},
		"zero fill limit":     valid(DTInt64, nil, 1<<40),
		"string truncated":    valid(DTString, []byte{0x80}, 1),
		"string past end":     valid(DTString, []byte{0x05, 'a'}, 1),
		"string extra bytes":  valid(DTString, []byte{0x01, 'a', 'b'}, 1),
		"string short list":   valid(DTString, []byte{0x01, 'a'}, 2),
		"string too many":     valid(DTString, []byte{0x00, 0x00}, 1<<40),
		"string long varint":  valid(DTString, unhex(t, "80 80 80 80 80 01"), 1),
		"string varint > u32": valid(DTString, unhex(t, "ff ff ff ff 1f"), 1),
		"string fill limit":   {Dtype: DTString, TensorShape: shapeOf(1 << 30), StringVal: [][]byte{{1}}},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			for _, delta := range []bool{false, true} {
				if x, err := DecodeTensor(p, delta); err == nil {
					t.Fatalf("decoded %+v", x)
				} else {
					t.Log(err)
				}
			}
		})
	}
}

func TestDecodeLenient(t *testing.T) {
	// No tensor_shape means a scalar.
	p := &tensorflowpb.TensorProto{Dtype: DTInt32, TensorContent: unhex(t, "04 0c 07000000")}
	x, err := DecodeTensor(p, true)
	if err != nil || !x.Equal(Scalar(int32(7))) {
		t.Fatalf("%+v, %v", x, err)
	}
	// Tensors without elements ignore their content, as TensorFlow does.
	for _, dt := range []DType{DTFloat, DTString} {
		p := &tensorflowpb.TensorProto{Dtype: dt, TensorShape: shapeOf(0, 2), TensorContent: []byte{1, 2, 3}}
		x, err := DecodeTensor(p, false)
		if err != nil || x.NumElements() != 0 || x.Validate() != nil {
			t.Fatalf("%v: %+v, %v", dt, x, err)
		}
	}
	// Dimension names are ignored.
	p = &tensorflowpb.TensorProto{Dtype: DTUint8, TensorShape: &tensorflowpb.TensorShapeProto{
		Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: 2, Name: "time"}}}, TensorContent: unhex(t, "02 04 0102")}
	if x, err := DecodeTensor(p, false); err != nil || !x.Equal(Vector([]uint8{1, 2})) {
		t.Fatalf("%+v, %v", x, err)
	}
}

func TestDecodeTypedValues(t *testing.T) {
	must := mustT(t)
	cases := []struct {
		name  string
		p     *tensorflowpb.TensorProto
		delta bool
		want  Tensor
	}{
		{"float fill", &tensorflowpb.TensorProto{Dtype: DTFloat, TensorShape: shapeOf(3), FloatVal: []float32{2.5}},
			false, Vector([]float32{2.5, 2.5, 2.5})},
		{"float repeat last", &tensorflowpb.TensorProto{Dtype: DTFloat, TensorShape: shapeOf(3), FloatVal: []float32{1, 2}},
			false, Vector([]float32{1, 2, 2})},
		{"float extra dropped", &tensorflowpb.TensorProto{Dtype: DTFloat, TensorShape: shapeOf(1), FloatVal: []float32{1, 2}},
			false, Vector([]float32{1})},
		{"double scalar", &tensorflowpb.TensorProto{Dtype: DTDouble, DoubleVal: []float64{-1}},
			false, Scalar(-1.0)},
		{"no values zeros", &tensorflowpb.TensorProto{Dtype: DTInt64, TensorShape: shapeOf(2)},
			false, Vector([]int64{0, 0})},
		{"int8 truncates", &tensorflowpb.TensorProto{Dtype: DTInt8, TensorShape: shapeOf(2), IntVal: []int32{-1, 300}},
			false, Vector([]int8{-1, 44})},
		{"uint16", &tensorflowpb.TensorProto{Dtype: DTUint16, TensorShape: shapeOf(2), IntVal: []int32{65535, 1}},
			false, Vector([]uint16{65535, 1})},
		{"int32 delta", &tensorflowpb.TensorProto{Dtype: DTInt32, TensorShape: shapeOf(2, 1), IntVal: []int32{5, 3}},
			true, must(FromSlice([]int32{5, 8}, 2, 1))},
		{"int64", &tensorflowpb.TensorProto{Dtype: DTInt64, TensorShape: shapeOf(1), Int64Val: []int64{math.MinInt64}},
			false, Vector([]int64{math.MinInt64})},
		{"uint32", &tensorflowpb.TensorProto{Dtype: DTUint32, TensorShape: shapeOf(1), Uint32Val: []uint32{math.MaxUint32}},
			false, Vector([]uint32{math.MaxUint32})},
		{"uint64", &tensorflowpb.TensorProto{Dtype: DTUint64, TensorShape: shapeOf(1), Uint64Val: []uint64{math.MaxUint64}},
			false, Vector([]uint64{math.MaxUint64})},
		{"bool", &tensorflowpb.TensorProto{Dtype: DTBool, TensorShape: shapeOf(3), BoolVal: []bool{false, true}},
			false, must(FromBools([]bool{false, true, true}, 3))},
		{"half", &tensorflowpb.TensorProto{Dtype: DTHalf, TensorShape: shapeOf(2), HalfVal: []int32{0x3c00, 0xc000}},
			false, must(FromFloat16Bits([]uint16{0x3c00, 0xc000}, 2))},
		{"bfloat16", &tensorflowpb.TensorProto{Dtype: DTBFloat16, TensorShape: shapeOf(1), HalfVal: []int32{0x3f80}},
			false, must(FromBFloat16Bits([]uint16{0x3f80}, 1))},
		{"complex64", &tensorflowpb.TensorProto{Dtype: DTComplex64, TensorShape: shapeOf(2), ScomplexVal: []float32{1, 2}},
			false, Vector([]complex64{complex(1, 2), complex(1, 2)})},
		{"complex128", &tensorflowpb.TensorProto{Dtype: DTComplex128, TensorShape: shapeOf(1), DcomplexVal: []float64{3, -4}},
			false, Vector([]complex128{complex(3, -4)})},
		{"qint32", &tensorflowpb.TensorProto{Dtype: DTQInt32, TensorShape: shapeOf(1), IntVal: []int32{-2}},
			false, must(NewTensor(DTQInt32, []int64{1}, []byte{0xfe, 0xff, 0xff, 0xff}))},
		{"string_val", &tensorflowpb.TensorProto{Dtype: DTString, TensorShape: shapeOf(3), StringVal: [][]byte{[]byte("a"), []byte("b")}},
			false, must(FromStrings([]string{"a", "b", "b"}, 3))},
		{"string no values", &tensorflowpb.TensorProto{Dtype: DTString, TensorShape: shapeOf(2)},
			false, must(FromStrings([]string{"", ""}, 2))},
	}
	for _, c := range cases {
		got, err := DecodeTensor(c.p, c.delta)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !got.Equal(c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestEncodeDecodeChunk(t *testing.T) {
	must := mustT(t)
	obs := must(FromSlice([]int32{1, 2, 4, 8, 2, 16}, 3, 2))
	reward := Vector([]float32{0.5, 1, -1})
	names := must(FromStrings([]string{"ab", "", "c"}, 3))
	seq := &reverbpb.SequenceRange{EpisodeId: 42, Start: 10, End: 12}
	c, err := EncodeChunk(7, seq, []Tensor{obs, reward, names}, true)
	if err != nil {
		t.Fatal(err)
	}
	seq.EpisodeId = 1 // the chunk holds a copy
	if c.ChunkKey != 7 || c.SequenceRange.GetEpisodeId() != 42 || c.SequenceRange.GetStart() != 10 ||
		c.SequenceRange.GetEnd() != 12 || !c.DeltaEncoded || c.DataTensorsLen != 3 || len(c.Data.Tensors) != 3 {
		t.Fatalf("chunk %v", c)
	}
	// 24 (int32 [3,2]) + 12 (float32 [3]) + 3×24+3 (strings) = 111.
	if c.DataUncompressedSize != 24+12+3*StringElementOverhead+3 {
		t.Fatalf("data_uncompressed_size = %d", c.DataUncompressedSize)
	}
	// The int32 column is delta-encoded (golden above).
	if want := unhex(t, "18 5c 01000000 02000000 03000000 06000000 feffffff 08000000"); !bytes.Equal(c.Data.Tensors[0].TensorContent, want) {
		t.Fatalf("column 0 content % x", c.Data.Tensors[0].TensorContent)
	}
	var wire reverbpb.ChunkData
	if err := proto.Unmarshal(marshal(t, c), &wire); err != nil {
		t.Fatal(err)
	}
	cols, err := DecodeChunk(&wire)
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != 3 || !cols[0].Equal(obs) || !cols[1].Equal(reward) || !cols[2].Equal(names) {
		t.Fatalf("decoded %+v", cols)
	}

	// deprecated_data is read when data is empty.
	old := &reverbpb.ChunkData{ChunkKey: 1, DeltaEncoded: true, DeprecatedData: c.Data.Tensors}
	cols, err = DecodeChunk(old)
	if err != nil || len(cols) != 3 || !cols[0].Equal(obs) {
		t.Fatalf("deprecated_data: %v", err)
	}
	// Without the flag the int32 column keeps its deltas.
	c2 := proto.Clone(c).(*reverbpb.ChunkData)
	c2.DeltaEncoded = false
	cols, err = DecodeChunk(c2)
	if err != nil || cols[0].Equal(obs) {
		t.Fatalf("flag ignored: %v", err)
	}
	// Empty chunk decodes to no tensors.
	if cols, err := DecodeChunk(&reverbpb.ChunkData{}); err != nil || len(cols) != 0 {
		t.Fatalf("%v %v", cols, err)
	}

	// Errors.
	if _, err := EncodeChunk(1, nil, []Tensor{obs}, false); err == nil {
		t.Error("nil sequence range accepted")
	}
	if _, err := EncodeChunk(1, seq, nil, false); err == nil {
		t.Error("no columns accepted")
	}
	if _, err := EncodeChunk(1, seq, []Tensor{obs, Vector([]float32{1})}, false); err == nil {
		t.Error("mismatched rows accepted")
	}
	if _, err := EncodeChunk(1, seq, []Tensor{Scalar(int32(1))}, false); err == nil {
		t.Error("scalar column accepted")
	}
	if _, err := EncodeChunk(1, seq, []Tensor{{DType: 20, Shape: []int64{1}, Data: []byte{0}}}, false); err == nil {
		t.Error("resource column accepted")
	}
	if _, err := DecodeChunk(nil); err == nil {
		t.Error("nil chunk accepted")
	}
	broken := proto.Clone(c).(*reverbpb.ChunkData)
	broken.Data.Tensors[1].TensorContent = []byte{0xff}
	if _, err := DecodeChunk(broken); err == nil || !strings.Contains(err.Error(), "tensor 1") {
		t.Errorf("broken chunk: %v", err)
	}
}

func FuzzDecodeTensor(f *testing.F) {
	for _, g := range goldens {
		var p tensorflowpb.TensorProto
		if err := proto.Unmarshal(unhex(f, g.wire), &p); err != nil {
			f.Fatal(err)
		}
		f.Add(unhex(f, g.wire), g.delta)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range allDTypes {
		p, err := EncodeTensor(randomTensor(r, dt, 3, 2), true)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(marshal(f, p), true)
	}
	f.Add(marshal(f, &tensorflowpb.TensorProto{Dtype: DTFloat, TensorShape: shapeOf(3), FloatVal: []float32{1}}), false)
	f.Add(marshal(f, &tensorflowpb.TensorProto{Dtype: DTString, TensorShape: shapeOf(2), StringVal: [][]byte{{1}}}), false)
	f.Add(marshal(f, &tensorflowpb.TensorProto{Dtype: DTFloat, TensorShape: shapeOf(2), TensorContent: unhex(f, "08 ff 00")}), false)
	f.Add(marshal(f, &tensorflowpb.TensorProto{Dtype: DTString, TensorShape: shapeOf(1), TensorContent: []byte{0x80}}), false)
	f.Add([]byte{0xff, 0x00}, false)

	f.Fuzz(func(t *testing.T, wire []byte, delta bool) {
		var p tensorflowpb.TensorProto
		if err := proto.Unmarshal(wire, &p); err != nil {
			return
		}
		x, err := DecodeTensor(&p, delta)
		if err != nil {
			return
		}
		if err := x.Validate(); err != nil {
			t.Fatalf("decoded an invalid tensor: %v", err)
		}
		// Whatever decodes must survive a round trip unchanged.
		q, err := EncodeTensor(x, delta)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		y, err := DecodeTensor(q, delta)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !y.Equal(x) {
			t.Fatal("round trip differs")
		}
	})
}

func benchTensor(n int) Tensor {
	r := rand.New(rand.NewPCG(5, 6))
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(r.NormFloat64())
	}
	return Vector(vals)
}

func BenchmarkEncodeTensor(b *testing.B) {
	for _, n := range []int{100, 10000} {
		x := benchTensor(n)
		b.Run(fmt.Sprintf("float32x%d", n), func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeTensor(x, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeTensor(b *testing.B) {
	for _, n := range []int{100, 10000} {
		p, err := EncodeTensor(benchTensor(n), false)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("float32x%d", n), func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeTensor(p, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFromSliceValues(b *testing.B) {
	vals := make([]float32, 10000)
	b.SetBytes(int64(len(vals) * 4))
	b.ReportAllocs()
	for b.Loop() {
		x := Vector(vals)
		if _, err := Values[float32](x); err != nil {
			b.Fatal(err)
		}
	}
}
