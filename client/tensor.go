package client

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/reverie-rl/reverie/api/tensorflowpb"
)

// DType is a tensor element type. It is an alias of the generated
// tensorflowpb.DataType, so its values are TensorFlow's DataType enum values
// (DT_FLOAT = 1, DT_DOUBLE = 2, ...) and it can be stored in a TensorProto
// without conversion. String() returns the TensorFlow name ("DT_FLOAT").
type DType = tensorflowpb.DataType

// The element types a Tensor can hold. Names follow TensorFlow's; the
// comments give the numpy dtype and Go representation.
const (
	DTFloat        DType = tensorflowpb.DataType_DT_FLOAT         // numpy float32; Go float32.
	DTDouble       DType = tensorflowpb.DataType_DT_DOUBLE        // numpy float64; Go float64.
	DTInt32        DType = tensorflowpb.DataType_DT_INT32         // numpy int32; Go int32.
	DTUint8        DType = tensorflowpb.DataType_DT_UINT8         // numpy uint8; Go uint8.
	DTInt16        DType = tensorflowpb.DataType_DT_INT16         // numpy int16; Go int16.
	DTInt8         DType = tensorflowpb.DataType_DT_INT8          // numpy int8; Go int8.
	DTString       DType = tensorflowpb.DataType_DT_STRING        // numpy bytes/str; Go []byte per element.
	DTComplex64    DType = tensorflowpb.DataType_DT_COMPLEX64     // numpy complex64; Go complex64.
	DTInt64        DType = tensorflowpb.DataType_DT_INT64         // numpy int64; Go int64.
	DTBool         DType = tensorflowpb.DataType_DT_BOOL          // numpy bool; Go bool (one byte, 0 or 1).
	DTQInt8        DType = tensorflowpb.DataType_DT_QINT8         // Quantized int8; raw bytes only.
	DTQUint8       DType = tensorflowpb.DataType_DT_QUINT8        // Quantized uint8; raw bytes only.
	DTQInt32       DType = tensorflowpb.DataType_DT_QINT32        // Quantized int32; raw bytes only.
	DTBFloat16     DType = tensorflowpb.DataType_DT_BFLOAT16      // bfloat16; Go uint16 bit patterns.
	DTQInt16       DType = tensorflowpb.DataType_DT_QINT16        // Quantized int16; raw bytes only.
	DTQUint16      DType = tensorflowpb.DataType_DT_QUINT16       // Quantized uint16; raw bytes only.
	DTUint16       DType = tensorflowpb.DataType_DT_UINT16        // numpy uint16; Go uint16.
	DTComplex128   DType = tensorflowpb.DataType_DT_COMPLEX128    // numpy complex128; Go complex128.
	DTHalf         DType = tensorflowpb.DataType_DT_HALF          // numpy float16; Go uint16 bit patterns.
	DTUint32       DType = tensorflowpb.DataType_DT_UINT32        // numpy uint32; Go uint32.
	DTUint64       DType = tensorflowpb.DataType_DT_UINT64        // numpy uint64; Go uint64.
	DTFloat8E5M2   DType = tensorflowpb.DataType_DT_FLOAT8_E5M2   // 8-bit float; raw bytes only.
	DTFloat8E4M3FN DType = tensorflowpb.DataType_DT_FLOAT8_E4M3FN // 8-bit float; raw bytes only.
	DTInt4         DType = tensorflowpb.DataType_DT_INT4          // 4-bit int stored one per byte; raw bytes only.
	DTUint4        DType = tensorflowpb.DataType_DT_UINT4         // 4-bit uint stored one per byte; raw bytes only.
)

// StringElementOverhead is the per-element size TensorFlow's
// Tensor::TotalBytes adds for DT_STRING tensors (sizeof(tstring) on 64-bit
// hosts). Reverb reports TotalBytes as ChunkData.data_uncompressed_size, so
// [Tensor.TotalBytes] uses the same value.
const StringElementOverhead = 24

// DTypeSize returns the size in bytes of one element of dt in the encoded
// (host memory, little-endian) layout and true, or 0 and false for dtypes
// without a fixed element size (DT_STRING) and for dtypes Reverb cannot
// encode (DT_INVALID, DT_RESOURCE, DT_VARIANT, reference types, unknown
// values). bool, the quantized 8-bit types, the float8 types and the 4-bit
// integer types take one byte per element; half and bfloat16 two; complex64
// eight and complex128 sixteen (real part first).
func DTypeSize(dt DType) (int, bool) {
	switch dt {
	case DTBool, DTInt8, DTUint8, DTQInt8, DTQUint8,
		DTFloat8E5M2, DTFloat8E4M3FN, DTInt4, DTUint4:
		return 1, true
	case DTInt16, DTUint16, DTQInt16, DTQUint16, DTHalf, DTBFloat16:
		return 2, true
	case DTFloat, DTInt32, DTUint32, DTQInt32:
		return 4, true
	case DTDouble, DTInt64, DTUint64, DTComplex64:
		return 8, true
	case DTComplex128:
		return 16, true
	}
	return 0, false
}

// supportedDType reports whether Reverb's compression accepts dt: every type
// with a fixed element size plus DT_STRING.
func supportedDType(dt DType) bool {
	if dt == DTString {
		return true
	}
	_, ok := DTypeSize(dt)
	return ok
}

// wordSize is the width of the little-endian words that make up one element
// of dt: the element size, except for complex types, which are pairs of
// floats.
func wordSize(dt DType) int {
	switch dt {
	case DTComplex64:
		return 4
	case DTComplex128:
		return 8
	}
	n, _ := DTypeSize(dt)
	return n
}

// hostLittleEndian is true when the host stores integers little-endian, in
// which case Go slices already have the wire layout and are copied as raw
// memory. On big-endian hosts the copy is followed by a byte swap of every
// word, so the package is portable. The check runs once at start-up.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// swapWords reverses the byte order of every w-byte word of b in place.
func swapWords(b []byte, w int) {
	if w <= 1 {
		return
	}
	for i := 0; i+w <= len(b); i += w {
		for l, r := i, i+w-1; l < r; l, r = l+1, r-1 {
			b[l], b[r] = b[r], b[l]
		}
	}
}

// Numeric is the set of Go element types with a direct TensorFlow dtype; see
// [DTypeOf] for the mapping. Half and bfloat16 are handled through their
// uint16 bit patterns ([FromFloat16Bits], [FromBFloat16Bits]) and bool
// through [FromBools].
type Numeric interface {
	float32 | float64 | int8 | int16 | int32 | int64 |
		uint8 | uint16 | uint32 | uint64 | complex64 | complex128
}

// DTypeOf returns the dtype used for Go element type T: float32 → DT_FLOAT,
// float64 → DT_DOUBLE, intN → DT_INTN, uintN → DT_UINTN, complex64 →
// DT_COMPLEX64, complex128 → DT_COMPLEX128.
func DTypeOf[T Numeric]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return DTFloat
	case float64:
		return DTDouble
	case int8:
		return DTInt8
	case int16:
		return DTInt16
	case int32:
		return DTInt32
	case int64:
		return DTInt64
	case uint8:
		return DTUint8
	case uint16:
		return DTUint16
	case uint32:
		return DTUint32
	case uint64:
		return DTUint64
	case complex64:
		return DTComplex64
	case complex128:
		return DTComplex128
	}
	panic("unreachable")
}

// Tensor is a dense, row-major n-dimensional array.
//
// A Tensor is a plain value: the zero Tensor is not valid (DT_INVALID), and
// functions that derive one Tensor from another ([Slice], [Row], [Squeeze0])
// share the backing storage, like Go slices do. Constructors copy their
// input, except [FromByteStrings] and [NewTensor], which document what they
// keep.
type Tensor struct {
	// DType is the element type.
	DType DType
	// Shape holds the dimensions, outermost first. A nil or empty Shape is
	// a scalar (one element). Dimensions must be >= 0.
	Shape []int64
	// Data holds the elements of non-string tensors in row-major order,
	// each in little-endian byte order (the layout Reverb compresses):
	// len(Data) = NumElements() × DTypeSize(DType). Nil for DT_STRING.
	Data []byte
	// Strings holds the elements of DT_STRING tensors in row-major order,
	// len(Strings) = NumElements(). Nil for other dtypes.
	Strings [][]byte
}

// shapeElements returns the product of shape's dimensions (1 for a scalar),
// or an error when a dimension is negative or the product overflows int64.
func shapeElements(shape []int64) (int64, error) {
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("client: dimension %d of shape %v is negative", i, shape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("client: shape %v has too many elements", shape)
		}
		n *= d
	}
	return n, nil
}

// NumElements returns the number of elements: the product of the dimensions,
// 1 for a scalar. The result is meaningless when the shape is invalid (see
// [Tensor.Validate]).
func (t Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Rank returns the number of dimensions (0 for a scalar).
func (t Tensor) Rank() int { return len(t.Shape) }

// Validate reports whether t is internally consistent: a supported dtype,
// non-negative dimensions, and Data (or, for DT_STRING, Strings) holding
// exactly NumElements elements, with the other field empty.
func (t Tensor) Validate() error {
	if !supportedDType(t.DType) {
		return fmt.Errorf("client: unsupported dtype %v", t.DType)
	}
	n, err := shapeElements(t.Shape)
	if err != nil {
		return err
	}
	if t.DType == DTString {
		if len(t.Data) != 0 {
			return errors.New("client: DT_STRING tensor has Data set; use Strings")
		}
		if int64(len(t.Strings)) != n {
			return fmt.Errorf("client: DT_STRING tensor of shape %v needs %d strings, has %d", t.Shape, n, len(t.Strings))
		}
		return nil
	}
	if len(t.Strings) != 0 {
		return fmt.Errorf("client: %v tensor has Strings set", t.DType)
	}
	size, _ := DTypeSize(t.DType)
	if n > math.MaxInt64/int64(size) || int64(len(t.Data)) != n*int64(size) {
		return fmt.Errorf("client: %v tensor of shape %v needs %d×%d data bytes, has %d", t.DType, t.Shape, n, size, len(t.Data))
	}
	return nil
}

// TotalBytes returns the size TensorFlow's Tensor::TotalBytes reports for
// t, which is what Reverb stores as ChunkData.data_uncompressed_size: for
// fixed-size dtypes NumElements × DTypeSize; for DT_STRING
// NumElements × [StringElementOverhead] plus the sum of the element lengths;
// 0 for tensors without elements.
func (t Tensor) TotalBytes() int64 {
	if t.DType != DTString {
		return int64(len(t.Data))
	}
	total := int64(len(t.Strings)) * StringElementOverhead
	for _, s := range t.Strings {
		total += int64(len(s))
	}
	return total
}

// Equal reports whether t and u have the same dtype, shape and elements
// (compared bytewise, so float NaNs with equal bits are equal).
func (t Tensor) Equal(u Tensor) bool {
	if t.DType != u.DType || len(t.Shape) != len(u.Shape) {
		return false
	}
	for i := range t.Shape {
		if t.Shape[i] != u.Shape[i] {
			return false
		}
	}
	if !bytes.Equal(t.Data, u.Data) || len(t.Strings) != len(u.Strings) {
		return false
	}
	for i := range t.Strings {
		if !bytes.Equal(t.Strings[i], u.Strings[i]) {
			return false
		}
	}
	return true
}

// Clone returns a deep copy of t.
func (t Tensor) Clone() Tensor {
	c := Tensor{DType: t.DType, Shape: cloneShape(t.Shape)}
	if t.Data != nil {
		c.Data = bytes.Clone(t.Data)
	}
	if t.Strings != nil {
		c.Strings = make([][]byte, len(t.Strings))
		for i, s := range t.Strings {
			c.Strings[i] = bytes.Clone(s)
		}
	}
	return c
}

func cloneShape(shape []int64) []int64 {
	if len(shape) == 0 {
		return nil
	}
	return append([]int64(nil), shape...)
}

// checkCount verifies that shape is valid and has n elements and returns a
// private copy of it.
func checkCount(shape []int64, n int) ([]int64, error) {
	want, err := shapeElements(shape)
	if err != nil {
		return nil, err
	}
	if want != int64(n) {
		return nil, fmt.Errorf("client: shape %v has %d elements, got %d values", shape, want, n)
	}
	return cloneShape(shape), nil
}

// rawBytes copies the host memory of vals into a new byte slice in
// little-endian layout, treating every w bytes as one word.
func rawBytes[T any](vals []T, w int) []byte {
	size := int(unsafe.Sizeof(*new(T)))
	out := make([]byte, len(vals)*size)
	if len(vals) > 0 {
		copy(out, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), len(out)))
	}
	if !hostLittleEndian {
		swapWords(out, w)
	}
	return out
}

// fromRaw copies little-endian data into a new []T.
func fromRaw[T any](data []byte, w int) []T {
	size := int(unsafe.Sizeof(*new(T)))
	out := make([]T, len(data)/size)
	if len(out) > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(out)*size)
		copy(dst, data)
		if !hostLittleEndian {
			swapWords(dst, w)
		}
	}
	return out
}

// FromSlice returns a tensor of dtype [DTypeOf][T] holding a copy of vals
// with the given shape. The shape is taken literally: no shape arguments
// means a scalar, so FromSlice(v) needs len(v) == 1; use [Vector] for a 1-D
// tensor. It fails when the shape's element count differs from len(vals) or
// a dimension is negative.
func FromSlice[T Numeric](vals []T, shape ...int64) (Tensor, error) {
	sh, err := checkCount(shape, len(vals))
	if err != nil {
		return Tensor{}, err
	}
	dt := DTypeOf[T]()
	return Tensor{DType: dt, Shape: sh, Data: rawBytes(vals, wordSize(dt))}, nil
}

// Vector returns a 1-D tensor of shape [len(vals)] holding a copy of vals.
func Vector[T Numeric](vals []T) Tensor {
	dt := DTypeOf[T]()
	return Tensor{DType: dt, Shape: []int64{int64(len(vals))}, Data: rawBytes(vals, wordSize(dt))}
}

// Scalar returns a rank-0 tensor holding v.
func Scalar[T Numeric](v T) Tensor {
	dt := DTypeOf[T]()
	return Tensor{DType: dt, Data: rawBytes([]T{v}, wordSize(dt))}
}

// Values returns a copy of t's elements as a []T in row-major order. It
// fails unless t.DType is [DTypeOf][T] and t is valid.
func Values[T Numeric](t Tensor) ([]T, error) {
	dt := DTypeOf[T]()
	if t.DType != dt {
		return nil, fmt.Errorf("client: tensor has dtype %v, not %v", t.DType, dt)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return fromRaw[T](t.Data, wordSize(dt)), nil
}

// ScalarValue returns the single element of a one-element tensor of dtype
// [DTypeOf][T] (a scalar, or any shape with one element).
func ScalarValue[T Numeric](t Tensor) (T, error) {
	vals, err := Values[T](t)
	if err != nil {
		var z T
		return z, err
	}
	if len(vals) != 1 {
		var z T
		return z, fmt.Errorf("client: tensor of shape %v is not a single value", t.Shape)
	}
	return vals[0], nil
}

// FromFloat16Bits returns a DT_HALF (IEEE 754 binary16, numpy float16)
// tensor from the elements' bit patterns.
func FromFloat16Bits(bits []uint16, shape ...int64) (Tensor, error) {
	return fromBits(DTHalf, bits, shape)
}

// FromBFloat16Bits returns a DT_BFLOAT16 tensor from the elements' bit
// patterns (the upper 16 bits of the corresponding float32).
func FromBFloat16Bits(bits []uint16, shape ...int64) (Tensor, error) {
	return fromBits(DTBFloat16, bits, shape)
}

func fromBits(dt DType, bits []uint16, shape []int64) (Tensor, error) {
	sh, err := checkCount(shape, len(bits))
	if err != nil {
		return Tensor{}, err
	}
	return Tensor{DType: dt, Shape: sh, Data: rawBytes(bits, 2)}, nil
}

// Float16Bits returns the bit patterns of a DT_HALF tensor's elements.
func Float16Bits(t Tensor) ([]uint16, error) { return bitsOf(DTHalf, t) }

// BFloat16Bits returns the bit patterns of a DT_BFLOAT16 tensor's elements.
func BFloat16Bits(t Tensor) ([]uint16, error) { return bitsOf(DTBFloat16, t) }

func bitsOf(dt DType, t Tensor) ([]uint16, error) {
	if t.DType != dt {
		return nil, fmt.Errorf("client: tensor has dtype %v, not %v", t.DType, dt)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return fromRaw[uint16](t.Data, 2), nil
}

// FromBools returns a DT_BOOL tensor (one byte per element, 0 or 1).
func FromBools(vals []bool, shape ...int64) (Tensor, error) {
	sh, err := checkCount(shape, len(vals))
	if err != nil {
		return Tensor{}, err
	}
	data := make([]byte, len(vals))
	for i, v := range vals {
		if v {
			data[i] = 1
		}
	}
	return Tensor{DType: DTBool, Shape: sh, Data: data}, nil
}

// Bools returns the elements of a DT_BOOL tensor; any non-zero byte is true.
func Bools(t Tensor) ([]bool, error) {
	if t.DType != DTBool {
		return nil, fmt.Errorf("client: tensor has dtype %v, not DT_BOOL", t.DType)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	out := make([]bool, len(t.Data))
	for i, b := range t.Data {
		out[i] = b != 0
	}
	return out, nil
}

// FromStrings returns a DT_STRING tensor holding copies of vals.
func FromStrings(vals []string, shape ...int64) (Tensor, error) {
	sh, err := checkCount(shape, len(vals))
	if err != nil {
		return Tensor{}, err
	}
	out := make([][]byte, len(vals))
	for i, s := range vals {
		out[i] = []byte(s)
	}
	return Tensor{DType: DTString, Shape: sh, Strings: out}, nil
}

// FromByteStrings returns a DT_STRING tensor whose elements are vals. The
// outer slice is copied but the element byte slices are retained, not
// copied; the caller must not modify them while the tensor is in use.
func FromByteStrings(vals [][]byte, shape ...int64) (Tensor, error) {
	sh, err := checkCount(shape, len(vals))
	if err != nil {
		return Tensor{}, err
	}
	return Tensor{DType: DTString, Shape: sh, Strings: append([][]byte{}, vals...)}, nil
}

// Strings returns copies of a DT_STRING tensor's elements as Go strings.
func Strings(t Tensor) ([]string, error) {
	if t.DType != DTString {
		return nil, fmt.Errorf("client: tensor has dtype %v, not DT_STRING", t.DType)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	out := make([]string, len(t.Strings))
	for i, s := range t.Strings {
		out[i] = string(s)
	}
	return out, nil
}

// NewTensor returns a tensor of any fixed-size dtype (including those
// without a Go element type, such as the quantized, float8 and 4-bit types)
// from its little-endian element bytes. data is retained, not copied. It
// fails for DT_STRING and unsupported dtypes and when len(data) does not
// match the shape.
func NewTensor(dt DType, shape []int64, data []byte) (Tensor, error) {
	if dt == DTString {
		return Tensor{}, errors.New("client: NewTensor cannot build DT_STRING tensors; use FromStrings")
	}
	t := Tensor{DType: dt, Shape: cloneShape(shape), Data: data}
	if err := t.Validate(); err != nil {
		return Tensor{}, err
	}
	return t, nil
}

// rowElements returns the number of elements in one row (the product of
// all dimensions but the first) of a tensor of rank >= 1.
func rowElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape[1:] {
		n *= d
	}
	return n
}

// Stack joins tensors of identical dtype and shape along a new leading
// axis: k tensors of shape S give one tensor of shape [k, S...] (k scalars
// give shape [k]). This is how a column of steps becomes a chunk tensor. It
// fails for an empty list, invalid tensors, or mismatched dtypes or shapes.
func Stack(ts []Tensor) (Tensor, error) {
	if len(ts) == 0 {
		return Tensor{}, errors.New("client: Stack of no tensors")
	}
	first := ts[0]
	for i, t := range ts {
		if err := t.Validate(); err != nil {
			return Tensor{}, fmt.Errorf("client: Stack: tensor %d: %w", i, err)
		}
		if t.DType != first.DType || !slices.Equal(t.Shape, first.Shape) {
			return Tensor{}, fmt.Errorf("client: Stack: tensor %d has %v%v, tensor 0 has %v%v",
				i, t.DType, t.Shape, first.DType, first.Shape)
		}
	}
	shape := append([]int64{int64(len(ts))}, first.Shape...)
	return joinRows(first.DType, shape, ts), nil
}

// Concat joins tensors of rank >= 1 along their first axis: shapes
// [a, S...] and [b, S...] give [a+b, S...]. All tensors must have the same
// dtype and the same trailing dimensions S. It fails for an empty list.
func Concat(ts []Tensor) (Tensor, error) {
	if len(ts) == 0 {
		return Tensor{}, errors.New("client: Concat of no tensors")
	}
	first := ts[0]
	var rows int64
	for i, t := range ts {
		if err := t.Validate(); err != nil {
			return Tensor{}, fmt.Errorf("client: Concat: tensor %d: %w", i, err)
		}
		if len(t.Shape) == 0 {
			return Tensor{}, fmt.Errorf("client: Concat: tensor %d is a scalar", i)
		}
		if t.DType != first.DType || !slices.Equal(t.Shape[1:], first.Shape[1:]) {
			return Tensor{}, fmt.Errorf("client: Concat: tensor %d has %v%v, tensor 0 has %v%v",
				i, t.DType, t.Shape, first.DType, first.Shape)
		}
		rows += t.Shape[0]
	}
	shape := append([]int64{rows}, first.Shape[1:]...)
	return joinRows(first.DType, shape, ts), nil
}

// joinRows concatenates the element storage of already validated tensors.
func joinRows(dt DType, shape []int64, ts []Tensor) Tensor {
	out := Tensor{DType: dt, Shape: shape}
	if dt == DTString {
		n := 0
		for _, t := range ts {
			n += len(t.Strings)
		}
		out.Strings = make([][]byte, 0, n)
		for _, t := range ts {
			out.Strings = append(out.Strings, t.Strings...)
		}
		return out
	}
	n := 0
	for _, t := range ts {
		n += len(t.Data)
	}
	out.Data = make([]byte, 0, n)
	for _, t := range ts {
		out.Data = append(out.Data, t.Data...)
	}
	return out
}

// Slice returns rows [from, to) of t along its first axis, shape
// [to-from, S...]. The result shares t's storage. It fails for scalars,
// invalid tensors and bounds outside 0 <= from <= to <= t.Shape[0].
func Slice(t Tensor, from, to int64) (Tensor, error) {
	if err := t.Validate(); err != nil {
		return Tensor{}, err
	}
	if len(t.Shape) == 0 {
		return Tensor{}, errors.New("client: cannot slice a scalar")
	}
	if from < 0 || from > to || to > t.Shape[0] {
		return Tensor{}, fmt.Errorf("client: rows [%d, %d) out of range for shape %v", from, to, t.Shape)
	}
	shape := append([]int64{to - from}, t.Shape[1:]...)
	per := rowElements(t.Shape)
	out := Tensor{DType: t.DType, Shape: shape}
	if t.DType == DTString {
		out.Strings = t.Strings[from*per : to*per : to*per]
		return out, nil
	}
	size, _ := DTypeSize(t.DType)
	stride := per * int64(size)
	out.Data = t.Data[from*stride : to*stride : to*stride]
	return out, nil
}

// Squeeze0 drops the leading dimension of a tensor whose first dimension is
// 1: shape [1, S...] becomes S. The result shares t's storage.
func Squeeze0(t Tensor) (Tensor, error) {
	if len(t.Shape) == 0 || t.Shape[0] != 1 {
		return Tensor{}, fmt.Errorf("client: cannot squeeze leading axis of shape %v", t.Shape)
	}
	if err := t.Validate(); err != nil {
		return Tensor{}, err
	}
	out := t
	out.Shape = cloneShape(t.Shape[1:])
	return out, nil
}

// Row returns row i of t (a tensor of rank >= 1), with the leading axis
// removed: shape S for t of shape [n, S...]. The result shares t's storage.
func Row(t Tensor, i int64) (Tensor, error) {
	if len(t.Shape) > 0 && (i < 0 || i >= t.Shape[0]) {
		return Tensor{}, fmt.Errorf("client: row %d out of range for shape %v", i, t.Shape)
	}
	s, err := Slice(t, i, i+1)
	if err != nil {
		return Tensor{}, err
	}
	return Squeeze0(s)
}
