package client

import (
	"bytes"
	"math"
	"slices"
	"testing"
)

func mustT(t *testing.T) func(Tensor, error) Tensor {
	return func(x Tensor, err error) Tensor {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
}

func TestDTypeSize(t *testing.T) {
	cases := []struct {
		dt   DType
		size int
		ok   bool
	}{
		{DTFloat, 4, true}, {DTDouble, 8, true}, {DTInt32, 4, true}, {DTUint8, 1, true},
		{DTInt16, 2, true}, {DTInt8, 1, true}, {DTString, 0, false}, {DTComplex64, 8, true},
		{DTInt64, 8, true}, {DTBool, 1, true}, {DTQInt8, 1, true}, {DTQUint8, 1, true},
		{DTQInt32, 4, true}, {DTBFloat16, 2, true}, {DTQInt16, 2, true}, {DTQUint16, 2, true},
		{DTUint16, 2, true}, {DTComplex128, 16, true}, {DTHalf, 2, true}, {DTUint32, 4, true},
		{DTUint64, 8, true}, {DTFloat8E5M2, 1, true}, {DTFloat8E4M3FN, 1, true},
		{DTInt4, 1, true}, {DTUint4, 1, true},
		{0, 0, false}, {20, 0, false}, {21, 0, false}, {101, 0, false}, {26, 0, false}, {999, 0, false},
	}
	for _, c := range cases {
		size, ok := DTypeSize(c.dt)
		if size != c.size || ok != c.ok {
			t.Errorf("DTypeSize(%v) = %d, %v; want %d, %v", c.dt, size, ok, c.size, c.ok)
		}
	}
	// The enum values of TensorFlow's DataType that Reverb chunks carry.
	want := map[DType]int32{DTFloat: 1, DTDouble: 2, DTInt32: 3, DTUint8: 4, DTInt16: 5, DTInt8: 6,
		DTString: 7, DTComplex64: 8, DTInt64: 9, DTBool: 10, DTBFloat16: 14, DTUint16: 17,
		DTComplex128: 18, DTHalf: 19, DTUint32: 22, DTUint64: 23}
	for dt, v := range want {
		if int32(dt) != v {
			t.Errorf("%v = %d, want %d", dt, int32(dt), v)
		}
	}
}

func TestDTypeOf(t *testing.T) {
	checks := []struct{ got, want DType }{
		{DTypeOf[float32](), DTFloat}, {DTypeOf[float64](), DTDouble},
		{DTypeOf[int8](), DTInt8}, {DTypeOf[int16](), DTInt16},
		{DTypeOf[int32](), DTInt32}, {DTypeOf[int64](), DTInt64},
		{DTypeOf[uint8](), DTUint8}, {DTypeOf[uint16](), DTUint16},
		{DTypeOf[uint32](), DTUint32}, {DTypeOf[uint64](), DTUint64},
		{DTypeOf[complex64](), DTComplex64}, {DTypeOf[complex128](), DTComplex128},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("case %d: %v, want %v", i, c.got, c.want)
		}
	}
}

func roundTripValues[T Numeric](t *testing.T, vals []T, wantData []byte) {
	t.Helper()
	x, err := FromSlice(vals, 2, int64(len(vals)/2))
	if err != nil {
		t.Fatal(err)
	}
	if x.DType != DTypeOf[T]() || !slices.Equal(x.Shape, []int64{2, int64(len(vals) / 2)}) {
		t.Fatalf("got %v%v", x.DType, x.Shape)
	}
	if !bytes.Equal(x.Data, wantData) {
		t.Fatalf("%v data = % x, want % x", x.DType, x.Data, wantData)
	}
	back, err := Values[T](x)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, vals) {
		t.Fatalf("%v values = %v, want %v", x.DType, back, vals)
	}
	// The tensor owns a copy.
	vals[0] = vals[1]
	if !bytes.Equal(x.Data, wantData) {
		t.Fatal("tensor aliases the input slice")
	}
}

func TestFromSliceLayout(t *testing.T) {
	roundTripValues(t, []float32{1, -2.5}, []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0})
	roundTripValues(t, []float64{1, -2}, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0xc0})
	roundTripValues(t, []int8{-1, 2}, []byte{0xff, 2})
	roundTripValues(t, []int16{-2, 0x102}, []byte{0xfe, 0xff, 2, 1})
	roundTripValues(t, []int32{-1, 0x01020304}, []byte{0xff, 0xff, 0xff, 0xff, 4, 3, 2, 1})
	roundTripValues(t, []int64{-1, 0x0102030405060708}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 8, 7, 6, 5, 4, 3, 2, 1})
	roundTripValues(t, []uint8{250, 3}, []byte{250, 3})
	roundTripValues(t, []uint16{0xabcd, 1}, []byte{0xcd, 0xab, 1, 0})
	roundTripValues(t, []uint32{0xdeadbeef, 1}, []byte{0xef, 0xbe, 0xad, 0xde, 1, 0, 0, 0})
	roundTripValues(t, []uint64{math.MaxUint64, 1}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0})
	// complex64 = (re float32, im float32).
	roundTripValues(t, []complex64{complex(1, -2.5), 0}, []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0})
	roundTripValues(t, []complex128{complex(1, -2), 0}, []byte{
		0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0xc0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
}

func TestSwapWords(t *testing.T) {
	b := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	swapWords(b, 4)
	if !bytes.Equal(b, []byte{4, 3, 2, 1, 8, 7, 6, 5}) {
		t.Fatalf("% x", b)
	}
	swapWords(b, 1)
	if !bytes.Equal(b, []byte{4, 3, 2, 1, 8, 7, 6, 5}) {
		t.Fatalf("% x", b)
	}
	if wordSize(DTComplex64) != 4 || wordSize(DTComplex128) != 8 || wordSize(DTHalf) != 2 {
		t.Fatal("wordSize")
	}
}

func TestConstructorsAndAccessors(t *testing.T) {
	must := mustT(t)

	s := Scalar(int64(7))
	if s.Rank() != 0 || s.NumElements() != 1 || s.TotalBytes() != 8 {
		t.Fatalf("scalar %+v", s)
	}
	if v, err := ScalarValue[int64](s); err != nil || v != 7 {
		t.Fatalf("ScalarValue = %v, %v", v, err)
	}
	if _, err := ScalarValue[int64](Vector([]int64{1, 2})); err == nil {
		t.Fatal("ScalarValue of 2 elements succeeded")
	}
	if _, err := ScalarValue[int32](s); err == nil {
		t.Fatal("ScalarValue with the wrong type succeeded")
	}

	v := Vector([]float32{1, 2, 3})
	if !slices.Equal(v.Shape, []int64{3}) || v.DType != DTFloat {
		t.Fatalf("Vector %+v", v)
	}
	if _, err := Values[float64](v); err == nil {
		t.Fatal("Values with the wrong type succeeded")
	}
	if _, err := FromSlice([]float32{1, 2, 3}); err == nil {
		t.Fatal("FromSlice without shape accepted 3 values (no shape = scalar)")
	}
	one := must(FromSlice([]float32{5}))
	if one.Rank() != 0 {
		t.Fatalf("FromSlice of one value without shape has shape %v", one.Shape)
	}
	if _, err := FromSlice([]int32{1, 2, 3}, 2, 2); err == nil {
		t.Fatal("shape mismatch accepted")
	}
	if _, err := FromSlice([]int32{}, -1); err == nil {
		t.Fatal("negative dimension accepted")
	}
	if _, err := FromSlice([]int32{}, math.MaxInt64, math.MaxInt64, 0); err == nil {
		t.Fatal("overflowing shape accepted")
	}
	empty := must(FromSlice([]int32{}, 0, 5))
	if empty.NumElements() != 0 || len(empty.Data) != 0 {
		t.Fatalf("empty %+v", empty)
	}

	h := must(FromFloat16Bits([]uint16{0x3c00, 0xc000}, 2)) // 1.0, -2.0
	if h.DType != DTHalf || !bytes.Equal(h.Data, []byte{0x00, 0x3c, 0x00, 0xc0}) {
		t.Fatalf("half %+v", h)
	}
	if bits, err := Float16Bits(h); err != nil || !slices.Equal(bits, []uint16{0x3c00, 0xc000}) {
		t.Fatalf("Float16Bits = %v, %v", bits, err)
	}
	if _, err := BFloat16Bits(h); err == nil {
		t.Fatal("BFloat16Bits of a half tensor succeeded")
	}
	bf := must(FromBFloat16Bits([]uint16{0x3f80}, 1)) // 1.0
	if bf.DType != DTBFloat16 || !bytes.Equal(bf.Data, []byte{0x80, 0x3f}) {
		t.Fatalf("bfloat16 %+v", bf)
	}
	if bits, err := BFloat16Bits(bf); err != nil || !slices.Equal(bits, []uint16{0x3f80}) {
		t.Fatalf("BFloat16Bits = %v, %v", bits, err)
	}
	if _, err := FromFloat16Bits([]uint16{1}, 2); err == nil {
		t.Fatal("half shape mismatch accepted")
	}

	b := must(FromBools([]bool{true, false, true}, 3))
	if b.DType != DTBool || !bytes.Equal(b.Data, []byte{1, 0, 1}) {
		t.Fatalf("bools %+v", b)
	}
	b.Data[1] = 7 // any non-zero byte reads as true
	if got, err := Bools(b); err != nil || !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("Bools = %v, %v", got, err)
	}
	if _, err := Bools(v); err == nil {
		t.Fatal("Bools of float tensor succeeded")
	}

	st := must(FromStrings([]string{"ab", ""}, 2))
	if st.DType != DTString || st.Data != nil || len(st.Strings) != 2 {
		t.Fatalf("strings %+v", st)
	}
	if got, err := Strings(st); err != nil || !slices.Equal(got, []string{"ab", ""}) {
		t.Fatalf("Strings = %v, %v", got, err)
	}
	if st.TotalBytes() != 2*StringElementOverhead+2 {
		t.Fatalf("TotalBytes = %d", st.TotalBytes())
	}
	if _, err := Strings(v); err == nil {
		t.Fatal("Strings of float tensor succeeded")
	}
	raw := [][]byte{[]byte("x"), []byte("yz")}
	bs := must(FromByteStrings(raw, 1, 2))
	raw[0] = nil // outer slice is copied
	if string(bs.Strings[0]) != "x" || !slices.Equal(bs.Shape, []int64{1, 2}) {
		t.Fatalf("byte strings %+v", bs)
	}
	if _, err := FromStrings([]string{"a"}, 2); err == nil {
		t.Fatal("string shape mismatch accepted")
	}

	f8 := must(NewTensor(DTFloat8E4M3FN, []int64{2}, []byte{0x38, 0xb8}))
	if f8.TotalBytes() != 2 {
		t.Fatalf("float8 %+v", f8)
	}
	if _, err := NewTensor(DTFloat, []int64{2}, []byte{1, 2, 3}); err == nil {
		t.Fatal("NewTensor with short data succeeded")
	}
	if _, err := NewTensor(DTString, nil, nil); err == nil {
		t.Fatal("NewTensor(DT_STRING) succeeded")
	}
	if _, err := NewTensor(dtResource(), nil, []byte{1}); err == nil {
		t.Fatal("NewTensor(DT_RESOURCE) succeeded")
	}
}

// dtResource returns DT_RESOURCE, which the package has no constant for.
func dtResource() DType { return 20 }

func TestValidate(t *testing.T) {
	bad := []Tensor{
		{},                                   // DT_INVALID
		{DType: 20, Data: []byte{1}},         // DT_RESOURCE
		{DType: DTFloat, Data: []byte{1, 2}}, // short data
		{DType: DTFloat, Shape: []int64{-1}}, // negative dim
		{DType: DTString},                    // scalar string without element
		{DType: DTString, Strings: [][]byte{nil}, Data: []byte{1}},
		{DType: DTUint8, Data: []byte{1}, Strings: [][]byte{nil}},
	}
	for i, x := range bad {
		if err := x.Validate(); err == nil {
			t.Errorf("case %d: %+v validated", i, x)
		}
	}
	good := []Tensor{
		{DType: DTUint8, Data: []byte{1}},
		{DType: DTString, Strings: [][]byte{nil}},
		{DType: DTDouble, Shape: []int64{0, 3}},
	}
	for i, x := range good {
		if err := x.Validate(); err != nil {
			t.Errorf("case %d: %v", i, err)
		}
	}
}

func TestEqualClone(t *testing.T) {
	a := Vector([]int32{1, 2, 3})
	c := a.Clone()
	if !a.Equal(c) {
		t.Fatal("clone differs")
	}
	c.Data[0] = 9
	if a.Data[0] != 1 || a.Equal(c) {
		t.Fatal("clone shares data")
	}
	s := mustT(t)(FromStrings([]string{"a"}, 1))
	sc := s.Clone()
	sc.Strings[0][0] = 'b'
	if string(s.Strings[0]) != "a" {
		t.Fatal("clone shares strings")
	}
	if a.Equal(Vector([]uint32{1, 2, 3})) || a.Equal(mustT(t)(FromSlice([]int32{1, 2, 3}, 3, 1))) {
		t.Fatal("Equal ignores dtype or shape")
	}
	if !(Tensor{DType: DTFloat, Shape: []int64{}, Data: nil}).Equal(Tensor{DType: DTFloat, Data: []byte{}}) {
		t.Fatal("nil and empty shape/data differ")
	}
}

func TestStackConcatSlice(t *testing.T) {
	must := mustT(t)
	r0 := must(FromSlice([]int32{1, 2}, 2))
	r1 := must(FromSlice([]int32{3, 4}, 2))
	r2 := must(FromSlice([]int32{5, 6}, 2))
	st := must(Stack([]Tensor{r0, r1, r2}))
	want := must(FromSlice([]int32{1, 2, 3, 4, 5, 6}, 3, 2))
	if !st.Equal(want) {
		t.Fatalf("Stack = %+v", st)
	}
	sc := must(Stack([]Tensor{Scalar(1.5), Scalar(2.5)}))
	if !sc.Equal(Vector([]float64{1.5, 2.5})) {
		t.Fatalf("Stack of scalars = %+v", sc)
	}
	if _, err := Stack(nil); err == nil {
		t.Fatal("Stack(nil) succeeded")
	}
	if _, err := Stack([]Tensor{r0, Vector([]int32{1})}); err == nil {
		t.Fatal("Stack of different shapes succeeded")
	}
	if _, err := Stack([]Tensor{r0, Vector([]int64{1, 2})}); err == nil {
		t.Fatal("Stack of different dtypes succeeded")
	}
	if _, err := Stack([]Tensor{r0, {DType: DTInt32, Shape: []int64{2}}}); err == nil {
		t.Fatal("Stack of an invalid tensor succeeded")
	}

	c := must(Concat([]Tensor{must(Slice(want, 0, 1)), must(Slice(want, 1, 3))}))
	if !c.Equal(want) {
		t.Fatalf("Concat = %+v", c)
	}
	if _, err := Concat([]Tensor{Scalar(int32(1))}); err == nil {
		t.Fatal("Concat of scalars succeeded")
	}
	if _, err := Concat([]Tensor{want, must(FromSlice([]int32{1, 2, 3}, 1, 3))}); err == nil {
		t.Fatal("Concat with different trailing dims succeeded")
	}
	if _, err := Concat(nil); err == nil {
		t.Fatal("Concat(nil) succeeded")
	}

	mid := must(Slice(want, 1, 2))
	if !mid.Equal(must(FromSlice([]int32{3, 4}, 1, 2))) {
		t.Fatalf("Slice = %+v", mid)
	}
	// Appending to a slice must not overwrite the parent's later rows.
	_ = append(mid.Data, 0xee)
	if !want.Equal(must(FromSlice([]int32{1, 2, 3, 4, 5, 6}, 3, 2))) {
		t.Fatal("append to slice clobbered parent")
	}
	if e := must(Slice(want, 3, 3)); e.NumElements() != 0 || !slices.Equal(e.Shape, []int64{0, 2}) {
		t.Fatalf("empty slice %+v", e)
	}
	for _, b := range [][2]int64{{-1, 1}, {2, 1}, {0, 4}} {
		if _, err := Slice(want, b[0], b[1]); err == nil {
			t.Errorf("Slice%v succeeded", b)
		}
	}
	if _, err := Slice(Scalar(int32(1)), 0, 1); err == nil {
		t.Fatal("Slice of scalar succeeded")
	}

	row := must(Row(want, 2))
	if !row.Equal(r2) {
		t.Fatalf("Row = %+v", row)
	}
	for _, i := range []int64{-1, 3, math.MaxInt64} {
		if _, err := Row(want, i); err == nil {
			t.Errorf("Row(%d) succeeded", i)
		}
	}
	sq := must(Squeeze0(must(FromSlice([]int32{7}, 1))))
	if !sq.Equal(Scalar(int32(7))) {
		t.Fatalf("Squeeze0 = %+v", sq)
	}
	if _, err := Squeeze0(want); err == nil {
		t.Fatal("Squeeze0 of [3,2] succeeded")
	}
	if _, err := Squeeze0(Scalar(int32(1))); err == nil {
		t.Fatal("Squeeze0 of scalar succeeded")
	}

	// Strings.
	s := must(FromStrings([]string{"a", "bb", "ccc", "dddd"}, 2, 2))
	if got := must(Row(s, 1)); !got.Equal(must(FromStrings([]string{"ccc", "dddd"}, 2))) {
		t.Fatalf("string Row = %+v", got)
	}
	ss := must(Stack([]Tensor{must(FromStrings([]string{"x"})), must(FromStrings([]string{"y"}))}))
	if !ss.Equal(must(FromStrings([]string{"x", "y"}, 2))) {
		t.Fatalf("string Stack = %+v", ss)
	}
	cs := must(Concat([]Tensor{must(Slice(s, 1, 2)), must(Slice(s, 0, 1))}))
	if !cs.Equal(must(FromStrings([]string{"ccc", "dddd", "a", "bb"}, 2, 2))) {
		t.Fatalf("string Concat = %+v", cs)
	}
}
