package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/golang/snappy"
	"google.golang.org/protobuf/proto"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
)

// maxSnappyRatio bounds how many output bytes one input byte of a Snappy
// block can produce: the densest element is a 3-byte copy tag emitting 64
// bytes (ratio 21.3). Content claiming more than this is rejected before
// any buffer is allocated.
const maxSnappyRatio = 22

// maxFillElements caps the number of elements DecodeTensor will synthesise
// from TensorFlow's typed *_val fields when fewer values than elements are
// present (TensorFlow repeats the last value, or uses zeros when there are
// none). It keeps a tiny malformed proto from requesting a huge allocation.
const maxFillElements = 1 << 20

// maxSnappyInput is the largest input a Snappy block can describe (its
// length header is a 32-bit varint).
const maxSnappyInput = 0xffffffff

// deltaApplies reports whether Reverb delta-encodes a chunk tensor of dtype
// dt and the given rank when the chunk is flagged delta_encoded: only
// integer tensors of rank >= 2.
func deltaApplies(dt DType, rank int) bool {
	if rank < 2 {
		return false
	}
	switch dt {
	case DTInt8, DTUint8, DTInt16, DTUint16, DTInt32, DTUint32, DTInt64, DTUint64:
		return true
	}
	return false
}

// deltaEncodeInPlace replaces every row of b (rows of rowBytes bytes,
// elements of size bytes, little-endian) by its difference from the
// previous row, in the unsigned type of that width with wrap-around. The
// first row is unchanged. Rows are processed from last to first so every
// subtraction sees the original previous row.
func deltaEncodeInPlace(b []byte, size, rowBytes int) {
	if rowBytes == 0 {
		return
	}
	le := binary.LittleEndian
	switch size {
	case 1:
		for o := len(b) - 1; o >= rowBytes; o-- {
			b[o] -= b[o-rowBytes]
		}
	case 2:
		for o := len(b) - 2; o >= rowBytes; o -= 2 {
			le.PutUint16(b[o:], le.Uint16(b[o:])-le.Uint16(b[o-rowBytes:]))
		}
	case 4:
		for o := len(b) - 4; o >= rowBytes; o -= 4 {
			le.PutUint32(b[o:], le.Uint32(b[o:])-le.Uint32(b[o-rowBytes:]))
		}
	case 8:
		for o := len(b) - 8; o >= rowBytes; o -= 8 {
			le.PutUint64(b[o:], le.Uint64(b[o:])-le.Uint64(b[o-rowBytes:]))
		}
	}
}

// deltaDecodeInPlace inverts deltaEncodeInPlace: every row from the second
// on becomes its stored value plus the already decoded previous row.
func deltaDecodeInPlace(b []byte, size, rowBytes int) {
	if rowBytes == 0 {
		return
	}
	le := binary.LittleEndian
	switch size {
	case 1:
		for o := rowBytes; o < len(b); o++ {
			b[o] += b[o-rowBytes]
		}
	case 2:
		for o := rowBytes; o+2 <= len(b); o += 2 {
			le.PutUint16(b[o:], le.Uint16(b[o:])+le.Uint16(b[o-rowBytes:]))
		}
	case 4:
		for o := rowBytes; o+4 <= len(b); o += 4 {
			le.PutUint32(b[o:], le.Uint32(b[o:])+le.Uint32(b[o-rowBytes:]))
		}
	case 8:
		for o := rowBytes; o+8 <= len(b); o += 8 {
			le.PutUint64(b[o:], le.Uint64(b[o:])+le.Uint64(b[o-rowBytes:]))
		}
	}
}

// rowBytes returns the byte size of one row of a valid tensor of rank >= 1.
func rowBytes(t Tensor) int {
	size, _ := DTypeSize(t.DType)
	return int(rowElements(t.Shape)) * size
}

func shapeToProto(shape []int64) *tensorflowpb.TensorShapeProto {
	sp := &tensorflowpb.TensorShapeProto{}
	if len(shape) > 0 {
		sp.Dim = make([]*tensorflowpb.TensorShapeProto_Dim, len(shape))
		for i, d := range shape {
			sp.Dim[i] = &tensorflowpb.TensorShapeProto_Dim{Size: d}
		}
	}
	return sp
}

// checkShape checks the dimensions of a fully defined TensorShapeProto
// (no dimensions = scalar, returned as nil) and returns them with the
// element count.
func checkShape(dims []int64, unknownRank bool) ([]int64, int64, error) {
	if unknownRank {
		return nil, 0, errors.New("client: tensor shape has unknown rank")
	}
	if len(dims) == 0 {
		dims = nil
	}
	for i, d := range dims {
		if d < 0 {
			return nil, 0, fmt.Errorf("client: dimension %d of tensor shape is %d (unknown or negative)", i, d)
		}
	}
	n, err := shapeElements(dims)
	if err != nil {
		return nil, 0, err
	}
	if n > math.MaxInt {
		return nil, 0, fmt.Errorf("client: shape %v has too many elements", dims)
	}
	return dims, n, nil
}

// EncodeTensor converts t to the TensorProto Reverb clients store in
// ChunkData.data.tensors: dtype and tensor_shape (always present, empty for
// a scalar) are set, and tensor_content holds
//
//   - for DT_STRING, TensorFlow's uncompressed string-list encoding: the
//     length of every element as a varint32, in row-major order, followed
//     by the bytes of every element in the same order (empty for a tensor
//     without elements);
//   - for every other dtype, the Snappy block format (not the framed
//     format) of the row-major little-endian element bytes. When delta is
//     true and t is an integer tensor of rank >= 2, the rows are first
//     replaced by their differences from the previous row (see
//     [EncodeChunk]); other tensors ignore delta.
//
// No other field is written. Snappy output is a valid block that Reverb
// decodes, but compressors may choose different (equally valid) encodings
// for inputs with repeats; inputs without any repeated 4-byte sequence are
// always a single literal. EncodeTensor fails for invalid tensors, for
// dtypes Reverb refuses (DT_INVALID, DT_RESOURCE, DT_VARIANT, unknown
// values), for string elements of 4 GiB or more and for data over 4 GiB.
func EncodeTensor(t Tensor, delta bool) (*tensorflowpb.TensorProto, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	p := &tensorflowpb.TensorProto{Dtype: t.DType, TensorShape: shapeToProto(t.Shape)}
	if t.DType == DTString {
		content, err := encodeStringList(t.Strings)
		if err != nil {
			return nil, err
		}
		p.TensorContent = content
		return p, nil
	}
	raw := t.Data
	if len(raw) > maxSnappyInput {
		return nil, fmt.Errorf("client: tensor of %d bytes is too large for Snappy", len(raw))
	}
	if delta && deltaApplies(t.DType, len(t.Shape)) {
		raw = bytes.Clone(raw)
		size, _ := DTypeSize(t.DType)
		deltaEncodeInPlace(raw, size, rowBytes(t))
	}
	p.TensorContent = snappy.Encode(nil, raw)
	return p, nil
}

func encodeStringList(strs [][]byte) ([]byte, error) {
	if len(strs) == 0 {
		return nil, nil
	}
	total := 0
	for i, s := range strs {
		if int64(len(s)) > math.MaxUint32 {
			return nil, fmt.Errorf("client: string element %d has %d bytes; at most 2^32-1 are encodable", i, len(s))
		}
		total += len(s)
	}
	out := make([]byte, 0, total+len(strs)*binary.MaxVarintLen32)
	for _, s := range strs {
		out = binary.AppendUvarint(out, uint64(len(s)))
	}
	for _, s := range strs {
		out = append(out, s...)
	}
	return out, nil
}

// DecodeTensor converts a TensorProto written by a Reverb client (or by
// [EncodeTensor]) back to a Tensor. delta is the chunk's delta_encoded flag:
// when true, integer tensors of rank >= 2 are delta-decoded after
// decompression; other tensors ignore it.
//
// A missing tensor_shape means a scalar. Non-string tensor_content must be a
// Snappy block that decompresses to exactly NumElements × DTypeSize bytes.
// DT_STRING tensor_content must be the string-list encoding with the element
// lengths summing to exactly the remaining bytes. Tensors without elements
// decode to empty tensors whatever their content (as in TensorFlow).
//
// When tensor_content is empty and the tensor has elements, the typed value
// fields are used as TensorFlow does: string_val for DT_STRING; float_val,
// double_val, int_val (int8/16/32, uint8/16, quantized and 4-bit types),
// int64_val, uint32_val, uint64_val, bool_val, half_val (half and bfloat16
// bit patterns), scomplex_val and dcomplex_val (real/imaginary pairs). Extra
// values are ignored, missing ones repeat the last value, and no values
// means all zeros (empty strings); filling is limited to 2^20 elements.
// The result is delta-decoded like compressed content.
//
// DecodeTensor never panics on malformed input; it returns an error for a
// nil proto, unsupported dtypes, unknown rank or negative dimensions,
// corrupt Snappy data, a wrong decompressed size, truncated or oversized
// varints, string lengths that do not match the content, and float8 tensors
// without tensor_content.
func DecodeTensor(p *tensorflowpb.TensorProto, delta bool) (Tensor, error) {
	if p == nil {
		return Tensor{}, errors.New("client: nil TensorProto")
	}
	var dims []int64
	if d := p.GetTensorShape().GetDim(); len(d) > 0 {
		dims = make([]int64, len(d))
		for i, x := range d {
			dims[i] = x.GetSize()
		}
	}
	return decodeTensor(p.GetDtype(), dims, p.GetTensorShape().GetUnknownRank(), p.GetTensorContent(), p, delta)
}

// decodeTensor is DecodeTensor on the parts of a TensorProto: dims are the
// sizes of tensor_shape's dimensions (kept as the result's shape), typed
// holds the typed value fields, read when content is empty and the tensor
// has elements (nil means none). content is only read.
func decodeTensor(dt DType, dims []int64, unknownRank bool, content []byte, typed *tensorflowpb.TensorProto, delta bool) (Tensor, error) {
	if !supportedDType(dt) {
		return Tensor{}, fmt.Errorf("client: unsupported tensor dtype %v", dt)
	}
	shape, n, err := checkShape(dims, unknownRank)
	if err != nil {
		return Tensor{}, err
	}
	if dt == DTString {
		strs, err := decodeStrings(content, typed.GetStringVal(), n)
		if err != nil {
			return Tensor{}, err
		}
		return Tensor{DType: dt, Shape: shape, Strings: strs}, nil
	}
	size, _ := DTypeSize(dt)
	if n > int64(math.MaxInt/size) {
		return Tensor{}, fmt.Errorf("client: %v tensor of shape %v is too large", dt, shape)
	}
	want := int(n) * size
	var data []byte
	switch {
	case n == 0:
		data = []byte{}
	case len(content) > 0:
		data, err = decompress(content, want)
	default:
		data, err = fromTypedValues(typed, dt, int(n), size)
	}
	if err != nil {
		return Tensor{}, fmt.Errorf("client: %v tensor of shape %v: %w", dt, shape, err)
	}
	t := Tensor{DType: dt, Shape: shape, Data: data}
	if delta && deltaApplies(dt, len(shape)) {
		deltaDecodeInPlace(t.Data, size, rowBytes(t))
	}
	return t, nil
}

// decompress decodes a Snappy block that must expand to exactly want bytes.
func decompress(content []byte, want int) ([]byte, error) {
	got, err := snappy.DecodedLen(content)
	if err != nil {
		return nil, fmt.Errorf("corrupt Snappy header: %w", err)
	}
	if got != want {
		return nil, fmt.Errorf("snappy content decompresses to %d bytes, want %d", got, want)
	}
	if int64(want) > int64(len(content))*maxSnappyRatio {
		return nil, fmt.Errorf("snappy content of %d bytes cannot expand to %d bytes", len(content), want)
	}
	out, err := snappy.Decode(make([]byte, want), content)
	if err != nil {
		return nil, fmt.Errorf("corrupt Snappy content: %w", err)
	}
	if len(out) != want {
		return nil, fmt.Errorf("snappy content decompresses to %d bytes, want %d", len(out), want)
	}
	return out, nil
}

// readVarint32 reads a varint of at most 5 bytes whose value fits in 32
// bits, returning the value and the number of bytes used (0 on error).
func readVarint32(b []byte) (uint32, int) {
	var v uint32
	for i := 0; i < 5; i++ {
		if i >= len(b) {
			return 0, 0
		}
		c := b[i]
		if i == 4 && c > 0x0f {
			return 0, 0
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// decodeStrings decodes the n elements of a DT_STRING tensor from its
// tensor_content, or from its string_val values (vals) when the content is
// empty.
func decodeStrings(content []byte, vals [][]byte, n int64) ([][]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if len(content) == 0 {
		if int64(len(vals)) < n && n > maxFillElements {
			return nil, fmt.Errorf("client: DT_STRING tensor of %d elements has only %d string_val values", n, len(vals))
		}
		out := make([][]byte, n)
		for i := range out {
			switch {
			case i < len(vals):
				out[i] = bytes.Clone(vals[i])
			case len(vals) > 0:
				out[i] = bytes.Clone(vals[len(vals)-1])
			default:
				out[i] = []byte{}
			}
		}
		return out, nil
	}
	// Every element needs at least one length byte.
	if n > int64(len(content)) {
		return nil, fmt.Errorf("client: DT_STRING content of %d bytes cannot hold %d elements", len(content), n)
	}
	lens := make([]uint32, n)
	pos := 0
	var total uint64
	for i := range lens {
		v, k := readVarint32(content[pos:])
		if k == 0 {
			return nil, fmt.Errorf("client: DT_STRING content: truncated or invalid length of element %d", i)
		}
		lens[i] = v
		total += uint64(v)
		pos += k
	}
	rest := content[pos:]
	if total != uint64(len(rest)) {
		return nil, fmt.Errorf("client: DT_STRING content: element lengths sum to %d bytes, %d bytes follow", total, len(rest))
	}
	body := bytes.Clone(rest)
	out := make([][]byte, n)
	off := 0
	for i, l := range lens {
		end := off + int(l)
		out[i] = body[off:end:end]
		off = end
	}
	return out, nil
}

// fill expands vals into n little-endian elements of size bytes each, with
// TensorFlow's rules: extra values are dropped, missing ones repeat the last
// value, and no values give zeros.
func fill[S any](vals []S, n, size int, put func([]byte, S)) ([]byte, error) {
	if len(vals) < n && n > maxFillElements {
		return nil, fmt.Errorf("%d typed values cannot fill %d elements (limit %d)", len(vals), n, maxFillElements)
	}
	out := make([]byte, n*size)
	if len(vals) == 0 {
		return out, nil
	}
	for i := 0; i < n; i++ {
		v := vals[min(i, len(vals)-1)]
		put(out[i*size:], v)
	}
	return out, nil
}

func pairs[F any, C any](vals []F, mk func(re, im F) C) []C {
	out := make([]C, len(vals)/2)
	for i := range out {
		out[i] = mk(vals[2*i], vals[2*i+1])
	}
	return out
}

// fromTypedValues fills n elements from p's typed value fields; p may be
// nil (no values).
func fromTypedValues(p *tensorflowpb.TensorProto, dt DType, n, size int) ([]byte, error) {
	le := binary.LittleEndian
	switch dt {
	case DTFloat:
		return fill(p.GetFloatVal(), n, size, func(b []byte, v float32) { le.PutUint32(b, math.Float32bits(v)) })
	case DTDouble:
		return fill(p.GetDoubleVal(), n, size, func(b []byte, v float64) { le.PutUint64(b, math.Float64bits(v)) })
	case DTInt64:
		return fill(p.GetInt64Val(), n, size, func(b []byte, v int64) { le.PutUint64(b, uint64(v)) })
	case DTUint32:
		return fill(p.GetUint32Val(), n, size, func(b []byte, v uint32) { le.PutUint32(b, v) })
	case DTUint64:
		return fill(p.GetUint64Val(), n, size, func(b []byte, v uint64) { le.PutUint64(b, v) })
	case DTBool:
		return fill(p.GetBoolVal(), n, size, func(b []byte, v bool) {
			if v {
				b[0] = 1
			}
		})
	case DTHalf, DTBFloat16:
		return fill(p.GetHalfVal(), n, size, func(b []byte, v int32) { le.PutUint16(b, uint16(v)) })
	case DTComplex64:
		vals := pairs(p.GetScomplexVal(), func(re, im float32) [2]float32 { return [2]float32{re, im} })
		return fill(vals, n, size, func(b []byte, v [2]float32) {
			le.PutUint32(b, math.Float32bits(v[0]))
			le.PutUint32(b[4:], math.Float32bits(v[1]))
		})
	case DTComplex128:
		vals := pairs(p.GetDcomplexVal(), func(re, im float64) [2]float64 { return [2]float64{re, im} })
		return fill(vals, n, size, func(b []byte, v [2]float64) {
			le.PutUint64(b, math.Float64bits(v[0]))
			le.PutUint64(b[8:], math.Float64bits(v[1]))
		})
	case DTInt32, DTQInt32:
		return fill(p.GetIntVal(), n, size, func(b []byte, v int32) { le.PutUint32(b, uint32(v)) })
	case DTInt16, DTUint16, DTQInt16, DTQUint16:
		return fill(p.GetIntVal(), n, size, func(b []byte, v int32) { le.PutUint16(b, uint16(v)) })
	case DTInt8, DTUint8, DTQInt8, DTQUint8, DTInt4, DTUint4:
		return fill(p.GetIntVal(), n, size, func(b []byte, v int32) { b[0] = byte(v) })
	}
	return nil, errors.New("tensor_content is empty and the dtype has no typed value field")
}

// EncodeChunk builds the ChunkData a Reverb client sends for one chunk.
// Every column is an already batched tensor [T, ...] and all columns must
// have the same leading dimension T (the chunk's rows); a chunk written by
// Reverb's TrajectoryWriter has exactly one column, the legacy Writer one
// per flattened field.
//
// The result has chunk_key = key, a copy of seq as sequence_range,
// delta_encoded = delta, one TensorProto per column from [EncodeTensor]
// (which delta-encodes only integer columns of rank >= 2),
// data_tensors_len = len(columns) and data_uncompressed_size = the sum of
// the columns' [Tensor.TotalBytes] before delta encoding and compression.
// As in Reverb, that size is TensorFlow's Tensor::TotalBytes, which for
// DT_STRING counts [StringElementOverhead] bytes per element plus the
// element bytes. seq must not be nil; its consistency with T is not checked.
func EncodeChunk(key uint64, seq *reverbpb.SequenceRange, columns []Tensor, delta bool) (*reverbpb.ChunkData, error) {
	if seq == nil {
		return nil, errors.New("client: EncodeChunk needs a sequence range")
	}
	if len(columns) == 0 {
		return nil, errors.New("client: EncodeChunk needs at least one column")
	}
	if len(columns) > math.MaxInt32 {
		return nil, fmt.Errorf("client: %d columns are too many for one chunk", len(columns))
	}
	c := &reverbpb.ChunkData{
		ChunkKey:       key,
		SequenceRange:  proto.Clone(seq).(*reverbpb.SequenceRange),
		DeltaEncoded:   delta,
		Data:           &reverbpb.ChunkData_Data{Tensors: make([]*tensorflowpb.TensorProto, len(columns))},
		DataTensorsLen: int32(len(columns)),
	}
	for i, col := range columns {
		if len(col.Shape) == 0 {
			return nil, fmt.Errorf("client: chunk column %d is a scalar; columns are batched [T, ...]", i)
		}
		if col.Shape[0] != columns[0].Shape[0] {
			return nil, fmt.Errorf("client: chunk column %d has %d rows, column 0 has %d", i, col.Shape[0], columns[0].Shape[0])
		}
		p, err := EncodeTensor(col, delta)
		if err != nil {
			return nil, fmt.Errorf("client: chunk column %d: %w", i, err)
		}
		c.Data.Tensors[i] = p
		c.DataUncompressedSize += col.TotalBytes()
	}
	return c, nil
}

// DecodeChunk decodes every tensor of a chunk, in order, applying the
// chunk's delta_encoded flag (see [DecodeTensor]). The tensors come from
// data.tensors, or from the deprecated_data field of older chunks when data holds
// none. data_tensors_len and data_uncompressed_size are informational and
// not checked.
func DecodeChunk(c *reverbpb.ChunkData) ([]Tensor, error) {
	if c == nil {
		return nil, errors.New("client: nil ChunkData")
	}
	protos := c.GetData().GetTensors()
	if len(protos) == 0 {
		protos = c.GetDeprecatedData()
	}
	out := make([]Tensor, len(protos))
	for i, p := range protos {
		t, err := DecodeTensor(p, c.GetDeltaEncoded())
		if err != nil {
			return nil, fmt.Errorf("client: chunk %d tensor %d: %w", c.GetChunkKey(), i, err)
		}
		out[i] = t
	}
	return out, nil
}
