package client

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/reverie-rl/reverie/internal/pbwire"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/reverie-rl/reverie/api/tensorflowpb"
)

// This file decodes the responses of sample and insert streams straight
// from gRPC's buffers, without building reverbpb messages. It accepts
// exactly the messages proto.Unmarshal accepts into
// reverbpb.SampleStreamResponse and reverbpb.InsertStreamResponse:
// fields in any order, unknown fields (and known fields with another wire
// type, which proto.Unmarshal keeps as unknown) skipped, the last value of
// a repeated singular scalar kept, repeated occurrences of a singular
// message merged, repeated scalars packed or not, proto3 strings checked
// for UTF-8, and every field of the schema checked for well-formedness
// even where the client ignores its value. A TensorProto with typed value
// fields (float_val and the like) is handed to proto.Unmarshal as it is.

// sampleResponse is a SampleStreamResponse.
type sampleResponse struct {
	entries []sampleEntry
	// buf holds the bytes the tensors' contents reference. Whoever
	// receives the response owns one reference to it and frees it.
	buf mem.Buffer
	// table is the last table name decoded, which the decoder reuses for
	// item.table when the bytes are the same, to save a string allocation
	// per sample. It outlives recycle.
	table string

	// The parts of the entries are carved out of these slabs, a few
	// allocations per response rather than several per sample. Each slab
	// is appended to by one level of the decoder only, so the parts of one
	// message are contiguous in it; once a message is decoded its part is
	// cut off with no spare capacity (see carve), so later appends to the
	// slab never write into it.
	infos   []sampleInfo
	chunks  []sampleChunk
	tensors []wireTensor
	dims    []int64
	columns []sampleColumn
	slices  []chunkSliceRef

	// spare is a partialSample to reuse for the next sample.
	spare *partialSample
}

// recycle readies r for the next response. Its slabs are reused unless
// referenced: a sample split over responses still points into them, so
// they are left to it and the next response gets new ones.
func (r *sampleResponse) recycle(referenced bool) {
	r.buf = nil
	if referenced {
		r.entries, r.infos, r.chunks, r.tensors, r.dims, r.columns, r.slices = nil, nil, nil, nil, nil, nil, nil
		return
	}
	r.entries, r.infos, r.chunks, r.tensors = r.entries[:0], r.infos[:0], r.chunks[:0], r.tensors[:0]
	r.dims, r.columns, r.slices = r.dims[:0], r.columns[:0], r.slices[:0]
}

// carve returns dst with slab[from:] appended: slab[from:] itself, with no
// spare capacity, when dst is empty (the common case: a message's
// repeated field all in one place).
func carve[T any](dst, slab []T, from int) []T {
	if from == len(slab) {
		return dst
	}
	if len(dst) == 0 {
		return slab[from:len(slab):len(slab)]
	}
	return append(dst, slab[from:]...)
}

// reserve makes room for n more elements in slab, so that a response's
// parts usually take one allocation each.
func reserve[T any](slab []T, n int) []T {
	if cap(slab)-len(slab) >= n {
		return slab
	}
	return slices.Grow(slab, n)
}

// sampleEntry is a SampleStreamResponse.SampleEntry.
type sampleEntry struct {
	info   *sampleInfo // nil if absent
	chunks []sampleChunk
	end    bool // end_of_sequence
}

// sampleInfo is a SampleInfo.
type sampleInfo struct {
	item        sampleItem // zero if absent
	probability float64
	tableSize   int64
	rateLimited bool
}

// sampleItem is the part of a PrioritizedItem the sampler uses.
type sampleItem struct {
	key          uint64
	table        string
	priority     float64
	timesSampled int32
	// inserted_at, when hasInserted.
	hasInserted bool
	seconds     int64
	nanos       int32
	columns     []sampleColumn // flat_trajectory.columns
}

// sampleColumn is a FlatTrajectory.Column.
type sampleColumn struct {
	slices  []chunkSliceRef
	squeeze bool
}

// chunkSliceRef is a FlatTrajectory.ChunkSlice.
type chunkSliceRef struct {
	key                   uint64
	offset, length, index int32
}

// sampleChunk is the part of a ChunkData the sampler uses.
type sampleChunk struct {
	key        uint64
	delta      bool
	tensors    []wireTensor // data.tensors
	deprecated []wireTensor // deprecated_data
	// decoded is set once decodeChunk has filled the tensors' t.
	decoded bool
}

// wireTensor is a TensorProto: its dtype, shape and content, or, when it
// has typed value fields, the TensorProto itself.
type wireTensor struct {
	pb          *tensorflowpb.TensorProto
	dtype       DType
	dims        []int64
	unknownRank bool
	content     []byte // references the response's buffer
	t           Tensor // decoded by decodeChunk; its Shape may be dims
}

// wireError is a malformed message. path names the field, from the
// outermost message in.
type wireError struct {
	msg   string // outermost message
	path  string
	cause string
}

func (e *wireError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("client: cannot parse %s: %s", e.path, e.cause)
	}
	return fmt.Sprintf("client: cannot parse %s.%s: %s", e.msg, e.path, e.cause)
}

func fieldErr(field, cause string) error { return &wireError{path: field, cause: cause} }

// inField prefixes the path of err, from a message in field, with field.
// It inlines, as it is called once per message field decoded.
func inField(field string, err error) error {
	if err == nil {
		return nil
	}
	return inFieldSlow(field, err)
}

func inFieldSlow(field string, err error) error {
	var we *wireError
	if errors.As(err, &we) {
		if we.path == "" {
			we.path = field
		} else {
			we.path = field + "." + we.path
		}
		return we
	}
	return &wireError{path: field, cause: err.Error()}
}

func inMessage(msg string, err error) error {
	var we *wireError
	if err != nil && errors.As(err, &we) {
		we.msg = msg
	}
	return err
}

// consumeTag reads a field's tag as proto.Unmarshal does: a varint with a
// field number in [1, 2^29-1]; an end-group tag outside a group is an
// error.
func consumeTag(b []byte) (protowire.Number, protowire.Type, []byte, error) {
	if num, typ, n, ok := pbwire.Tag(b); ok && typ != protowire.EndGroupType {
		return num, typ, b[n:], nil
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, nil, fieldErr("(tag)", protowire.ParseError(n).Error())
	}
	num := v >> 3
	if num < uint64(protowire.MinValidNumber) || num > uint64(protowire.MaxValidNumber) {
		return 0, 0, nil, fieldErr("(tag)", fmt.Sprintf("invalid field number %d", num))
	}
	typ := protowire.Type(v & 7)
	if typ == protowire.EndGroupType {
		return 0, 0, nil, fieldErr(fmt.Sprintf("(field %d)", num), "unexpected end group")
	}
	return protowire.Number(num), typ, b[n:], nil
}

// skipField skips the value of an unknown field.
func skipField(b []byte, num protowire.Number, typ protowire.Type) ([]byte, error) {
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return nil, fieldErr(fmt.Sprintf("(field %d)", num), protowire.ParseError(n).Error())
	}
	return b[n:], nil
}

func consumeVarint(b []byte, field string) (uint64, []byte, error) {
	if v, n, ok := pbwire.Varint(b); ok {
		return v, b[n:], nil
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, nil, fieldErr(field, protowire.ParseError(n).Error())
	}
	return v, b[n:], nil
}

func consumeFixed64(b []byte, field string) (uint64, []byte, error) {
	v, n := protowire.ConsumeFixed64(b)
	if n < 0 {
		return 0, nil, fieldErr(field, protowire.ParseError(n).Error())
	}
	return v, b[n:], nil
}

func consumeBytes(b []byte, field string) ([]byte, []byte, error) {
	if v, n, ok := pbwire.Bytes(b); ok {
		return v, b[n:], nil
	}
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, nil, fieldErr(field, protowire.ParseError(n).Error())
	}
	return v, b[n:], nil
}

// consumeString reads a proto3 string field, which must be UTF-8, and
// returns it as hint when the bytes are the same.
func consumeString(b []byte, field, hint string) (string, []byte, error) {
	v, b, err := consumeBytes(b, field)
	if err != nil {
		return "", nil, err
	}
	if string(v) == hint {
		return hint, b, nil
	}
	if !utf8.Valid(v) {
		return "", nil, fieldErr(field, "string field contains invalid UTF-8")
	}
	return string(v), b, nil
}

// checkPackedVarints checks the content of a packed repeated varint field.
func checkPackedVarints(b []byte, field string) error {
	for len(b) > 0 {
		_, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return fieldErr(field, protowire.ParseError(n).Error())
		}
		b = b[n:]
	}
	return nil
}

// decode decodes b, a SampleStreamResponse, into r.entries.
func (r *sampleResponse) decode(b []byte) error {
	// Count the entries first, to allocate them at once.
	count := 0
	for rest := b; len(rest) > 0; {
		num, typ, after, err := consumeTag(rest)
		if err != nil {
			break // reported below
		}
		if num == 1 && typ == protowire.BytesType {
			count++
		}
		if rest, err = skipField(after, num, typ); err != nil {
			break
		}
	}
	r.entries = reserve(r.entries[:0], count)
	r.infos = reserve(r.infos, count)
	r.chunks = reserve(r.chunks, count)
	r.tensors = reserve(r.tensors, count)
	r.dims = reserve(r.dims, 2*count)
	r.columns = reserve(r.columns, count)
	r.slices = reserve(r.slices, count)
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return inMessage("SampleStreamResponse", err)
		}
		b = rest
		if num == 1 && typ == protowire.BytesType {
			var v []byte
			if v, b, err = consumeBytes(b, "entries"); err == nil {
				r.entries = append(r.entries, sampleEntry{})
				err = inField("entries", r.decodeEntry(v, &r.entries[len(r.entries)-1]))
			}
		} else {
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return inMessage("SampleStreamResponse", err)
		}
	}
	return nil
}

func (r *sampleResponse) decodeEntry(b []byte, e *sampleEntry) error {
	from := len(r.chunks)
	defer func() { e.chunks = carve(e.chunks, r.chunks, from) }()
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 1 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "info"); err == nil {
				if e.info == nil {
					r.infos = append(r.infos, sampleInfo{})
					e.info = &r.infos[len(r.infos)-1]
				}
				err = inField("info", r.decodeInfo(v, e.info))
			}
		case num == 2 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "data"); err == nil {
				r.chunks = append(r.chunks, sampleChunk{})
				err = inField("data", r.decodeChunkData(v, &r.chunks[len(r.chunks)-1]))
			}
		case num == 3 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "end_of_sequence")
			e.end = x != 0
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *sampleResponse) decodeInfo(b []byte, info *sampleInfo) error {
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 1 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "item"); err == nil {
				err = inField("item", r.decodeItem(v, &info.item))
			}
		case num == 2 && typ == protowire.Fixed64Type:
			x, b, err = consumeFixed64(b, "probability")
			info.probability = math.Float64frombits(x)
		case num == 3 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "table_size")
			info.tableSize = int64(x)
		case num == 4 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "rate_limited")
			info.rateLimited = x != 0
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *sampleResponse) decodeItem(b []byte, it *sampleItem) error {
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "key")
			it.key = x
		case num == 2 && typ == protowire.BytesType:
			it.table, b, err = consumeString(b, "table", r.table)
			r.table = it.table
		case num == 3 && typ == protowire.VarintType:
			_, b, err = consumeVarint(b, "deprecated_chunk_keys")
		case num == 3 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "deprecated_chunk_keys"); err == nil {
				err = checkPackedVarints(v, "deprecated_chunk_keys")
			}
		case num == 4 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "deprecated_sequence_range"); err == nil {
				err = inField("deprecated_sequence_range", checkVarintMessage(v, 2))
			}
		case num == 5 && typ == protowire.Fixed64Type:
			x, b, err = consumeFixed64(b, "priority")
			it.priority = math.Float64frombits(x)
		case num == 6 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "times_sampled")
			it.timesSampled = int32(x)
		case num == 7 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "inserted_at"); err == nil {
				it.hasInserted = true
				err = inField("inserted_at", decodeTimestamp(v, it))
			}
		case num == 8 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "flat_trajectory"); err == nil {
				err = inField("flat_trajectory", r.decodeTrajectory(v, it))
			}
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkVarintMessage checks a message whose fields 1..n are all varints
// whose values the client ignores (SliceRange, SequenceRange).
func checkVarintMessage(b []byte, n protowire.Number) error {
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		if num <= n && typ == protowire.VarintType {
			_, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return fieldErr(fmt.Sprintf("(field %d)", num), protowire.ParseError(m).Error())
			}
			b = b[m:]
		} else {
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeTimestamp(b []byte, it *sampleItem) error {
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var x uint64
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "seconds")
			it.seconds = int64(x)
		case num == 2 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "nanos")
			it.nanos = int32(x)
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *sampleResponse) decodeTrajectory(b []byte, it *sampleItem) error {
	from := len(r.columns)
	defer func() { it.columns = carve(it.columns, r.columns, from) }()
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		if num == 1 && typ == protowire.BytesType {
			var v []byte
			if v, b, err = consumeBytes(b, "columns"); err == nil {
				r.columns = append(r.columns, sampleColumn{})
				err = inField("columns", r.decodeColumn(v, &r.columns[len(r.columns)-1]))
			}
		} else {
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *sampleResponse) decodeColumn(b []byte, col *sampleColumn) error {
	from := len(r.slices)
	defer func() { col.slices = carve(col.slices, r.slices, from) }()
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 1 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "chunk_slices"); err == nil {
				r.slices = append(r.slices, chunkSliceRef{})
				err = inField("chunk_slices", decodeChunkSlice(v, &r.slices[len(r.slices)-1]))
			}
		case num == 2 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "squeeze")
			col.squeeze = x != 0
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeChunkSlice(b []byte, s *chunkSliceRef) error {
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var x uint64
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "chunk_key")
			s.key = x
		case num == 2 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "offset")
			s.offset = int32(x)
		case num == 3 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "length")
			s.length = int32(x)
		case num == 4 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "index")
			s.index = int32(x)
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *sampleResponse) decodeChunkData(b []byte, c *sampleChunk) error {
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "chunk_key")
			c.key = x
		case num == 2 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "sequence_range"); err == nil {
				err = inField("sequence_range", checkVarintMessage(v, 4))
			}
		case num == 3 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "deprecated_data"); err == nil {
				from := len(r.tensors)
				r.tensors = append(r.tensors, wireTensor{})
				err = inField("deprecated_data", r.decodeWireTensor(v, &r.tensors[from]))
				c.deprecated = carve(c.deprecated, r.tensors, from)
			}
		case num == 4 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "delta_encoded")
			c.delta = x != 0
		case num == 5 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "data"); err == nil {
				err = inField("data", r.decodeChunkTensors(v, c))
			}
		case num == 6 && typ == protowire.VarintType:
			_, b, err = consumeVarint(b, "data_tensors_len")
		case num == 7 && typ == protowire.VarintType:
			_, b, err = consumeVarint(b, "data_uncompressed_size")
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeChunkTensors decodes a ChunkData.Data, appending its tensors.
func (r *sampleResponse) decodeChunkTensors(b []byte, c *sampleChunk) error {
	from := len(r.tensors)
	defer func() { c.tensors = carve(c.tensors, r.tensors, from) }()
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		if num == 1 && typ == protowire.BytesType {
			var v []byte
			if v, b, err = consumeBytes(b, "tensors"); err == nil {
				r.tensors = append(r.tensors, wireTensor{})
				err = inField("tensors", r.decodeWireTensor(v, &r.tensors[len(r.tensors)-1]))
			}
		} else {
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// typedValueField reports whether num is one of TensorProto's typed value
// fields (half_val, float_val, ..., uint64_val).
func typedValueField(num protowire.Number) bool {
	return num >= 5 && num <= 13 || num == 16 || num == 17
}

// decodeWireTensor decodes a TensorProto. One with typed value fields is
// unmarshaled by proto.Unmarshal instead, as it is rare.
func (r *sampleResponse) decodeWireTensor(b []byte, t *wireTensor) error {
	all := b
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "dtype")
			t.dtype = DType(int32(x))
		case num == 2 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "tensor_shape"); err == nil {
				err = inField("tensor_shape", r.decodeShape(v, t))
			}
		case num == 3 && typ == protowire.VarintType:
			_, b, err = consumeVarint(b, "version_number")
		case num == 4 && typ == protowire.BytesType:
			v, b, err = consumeBytes(b, "tensor_content")
			t.content = v
			if len(v) == 0 {
				t.content = nil
			}
		case typedValueField(num):
			pb := &tensorflowpb.TensorProto{}
			if err := proto.Unmarshal(all, pb); err != nil {
				return &wireError{cause: err.Error()}
			}
			*t = wireTensor{pb: pb}
			return nil
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *sampleResponse) decodeShape(b []byte, t *wireTensor) error {
	from := len(r.dims)
	defer func() { t.dims = carve(t.dims, r.dims, from) }()
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return err
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 2 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "dim"); err == nil {
				var size int64
				size, err = decodeDim(v)
				err = inField("dim", err)
				r.dims = append(r.dims, size)
			}
		case num == 3 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "unknown_rank")
			t.unknownRank = x != 0
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeDim decodes a TensorShapeProto.Dim and returns its size.
func decodeDim(b []byte) (int64, error) {
	var size int64
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return 0, err
		}
		b = rest
		var x uint64
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "size")
			size = int64(x)
		case num == 2 && typ == protowire.BytesType:
			_, b, err = consumeString(b, "name", "")
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return 0, err
		}
	}
	return size, nil
}

// insertResponse is an InsertStreamResponse. Its keys are overwritten by
// the next response decoded into it.
type insertResponse struct {
	keys []uint64
}

// GetKeys returns the confirmed keys, as InsertStreamResponse's GetKeys.
func (r *insertResponse) GetKeys() []uint64 { return r.keys }

func (r *insertResponse) decode(b []byte) error {
	r.keys = r.keys[:0]
	for len(b) > 0 {
		num, typ, rest, err := consumeTag(b)
		if err != nil {
			return inMessage("InsertStreamResponse", err)
		}
		b = rest
		var v []byte
		var x uint64
		switch {
		case num == 1 && typ == protowire.VarintType:
			x, b, err = consumeVarint(b, "keys")
			r.keys = append(r.keys, x)
		case num == 1 && typ == protowire.BytesType:
			if v, b, err = consumeBytes(b, "keys"); err == nil {
				for len(v) > 0 {
					if x, v, err = consumeVarint(v, "keys"); err != nil {
						break
					}
					r.keys = append(r.keys, x)
				}
			}
		default:
			b, err = skipField(b, num, typ)
		}
		if err != nil {
			return inMessage("InsertStreamResponse", err)
		}
	}
	return nil
}
