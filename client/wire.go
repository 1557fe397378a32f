package client

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/golang/snappy"
	"github.com/reverie-rl/reverie/internal/bufpool"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// This file encodes the writer's chunks, items and InsertStreamRequests
// straight into their protobuf wire form, without building reverbpb
// messages: each chunk and item is encoded once, when it is finalised or
// created, and a request is a concatenation of those encodings. The output
// follows proto.Marshal's rules (fields in number order, proto3 zero
// values omitted, repeated scalars packed), so it decodes to the same
// messages EncodeChunk and reverbpb.PrioritizedItem would have produced.

// Wire tags (field number and wire type) of the fields written here.
var (
	tagChunkKey          = protowire.EncodeTag(1, protowire.VarintType)  // ChunkData.chunk_key
	tagChunkSeq          = protowire.EncodeTag(2, protowire.BytesType)   // ChunkData.sequence_range
	tagChunkDelta        = protowire.EncodeTag(4, protowire.VarintType)  // ChunkData.delta_encoded
	tagChunkData         = protowire.EncodeTag(5, protowire.BytesType)   // ChunkData.data
	tagChunkTensorsLen   = protowire.EncodeTag(6, protowire.VarintType)  // ChunkData.data_tensors_len
	tagChunkUncompressed = protowire.EncodeTag(7, protowire.VarintType)  // ChunkData.data_uncompressed_size
	tagSeqEpisode        = protowire.EncodeTag(1, protowire.VarintType)  // SequenceRange.episode_id
	tagSeqStart          = protowire.EncodeTag(2, protowire.VarintType)  // SequenceRange.start
	tagSeqEnd            = protowire.EncodeTag(3, protowire.VarintType)  // SequenceRange.end
	tagSeqSparse         = protowire.EncodeTag(4, protowire.VarintType)  // SequenceRange.sparse
	tagDataTensors       = protowire.EncodeTag(1, protowire.BytesType)   // ChunkData.Data.tensors
	tagTensorDtype       = protowire.EncodeTag(1, protowire.VarintType)  // TensorProto.dtype
	tagTensorShape       = protowire.EncodeTag(2, protowire.BytesType)   // TensorProto.tensor_shape
	tagTensorContent     = protowire.EncodeTag(4, protowire.BytesType)   // TensorProto.tensor_content
	tagShapeDim          = protowire.EncodeTag(2, protowire.BytesType)   // TensorShapeProto.dim
	tagDimSize           = protowire.EncodeTag(1, protowire.VarintType)  // TensorShapeProto.Dim.size
	tagItemKey           = protowire.EncodeTag(1, protowire.VarintType)  // PrioritizedItem.key
	tagItemTable         = protowire.EncodeTag(2, protowire.BytesType)   // PrioritizedItem.table
	tagItemPriority      = protowire.EncodeTag(5, protowire.Fixed64Type) // PrioritizedItem.priority
	tagItemTrajectory    = protowire.EncodeTag(8, protowire.BytesType)   // PrioritizedItem.flat_trajectory
	tagTrajColumn        = protowire.EncodeTag(1, protowire.BytesType)   // FlatTrajectory.columns
	tagColumnSlice       = protowire.EncodeTag(1, protowire.BytesType)   // FlatTrajectory.Column.chunk_slices
	tagColumnSqueeze     = protowire.EncodeTag(2, protowire.VarintType)  // FlatTrajectory.Column.squeeze
	tagSliceKey          = protowire.EncodeTag(1, protowire.VarintType)  // FlatTrajectory.ChunkSlice.chunk_key
	tagSliceOffset       = protowire.EncodeTag(2, protowire.VarintType)  // FlatTrajectory.ChunkSlice.offset
	tagSliceLength       = protowire.EncodeTag(3, protowire.VarintType)  // FlatTrajectory.ChunkSlice.length
	tagRequestChunks     = protowire.EncodeTag(1, protowire.BytesType)   // InsertStreamRequest.chunks
	tagRequestItems      = protowire.EncodeTag(2, protowire.BytesType)   // InsertStreamRequest.items
	tagRequestKeep       = protowire.EncodeTag(3, protowire.BytesType)   // InsertStreamRequest.keep_chunk_keys, packed
)

// All tags above are below 128 and take one byte.
func appendTag(b []byte, tag uint64) []byte { return append(b, byte(tag)) }

// sizeVarint is the size of v as a varint.
func sizeVarint(v uint64) int {
	// Same as protowire.SizeVarint; inlined by hand so that the callers
	// stay cheap.
	return int(9*uint32(bits.Len64(v))+64) / 64
}

// sizeBytesField is the size of a length-delimited field of n bytes with a
// one-byte tag.
func sizeBytesField(n int) int { return 1 + sizeVarint(uint64(n)) + n }

func appendVarintField(b []byte, tag, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(append(b, byte(tag)), v)
}

func sizeVarintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + sizeVarint(v)
}

func appendBoolField(b []byte, tag uint64, v bool) []byte {
	if !v {
		return b
	}
	return append(b, byte(tag), 1)
}

func sizeBoolField(v bool) int {
	if v {
		return 2
	}
	return 0
}

// chunkHead is what a writer chunk's ChunkData holds besides its tensor's
// content: the chunk has exactly one tensor, of the stacked rows.
type chunkHead struct {
	key          uint64
	episode      uint64
	start, end   int32
	sparse       bool
	delta        bool
	dtype        DType
	shape        []int64 // of the stacked tensor, [rows, step shape...]
	uncompressed int64   // data_uncompressed_size
}

func (h *chunkHead) seqLen() int {
	return sizeVarintField(h.episode) + sizeVarintField(uint64(int64(h.start))) +
		sizeVarintField(uint64(int64(h.end))) + sizeBoolField(h.sparse)
}

func (h *chunkHead) shapeLen() int {
	n := 0
	for _, d := range h.shape {
		n += sizeBytesField(sizeVarintField(uint64(d)))
	}
	return n
}

// tensorLen is the size of the TensorProto with contentLen bytes of
// tensor_content.
func (h *chunkHead) tensorLen(contentLen int) int {
	n := sizeVarintField(uint64(int64(h.dtype))) + sizeBytesField(h.shapeLen())
	if contentLen > 0 {
		n += sizeBytesField(contentLen)
	}
	return n
}

// prefixLen is the length of appendPrefix's output.
func (h *chunkHead) prefixLen(contentLen int) int {
	tensorLen := h.tensorLen(contentLen)
	return sizeVarintField(h.key) + sizeBytesField(h.seqLen()) + sizeBoolField(h.delta) +
		1 + sizeVarint(uint64(sizeBytesField(tensorLen))) + 1 + sizeVarint(uint64(tensorLen)) +
		tensorLen - contentLen
}

// appendPrefix appends the encoding of the ChunkData up to the content of
// its tensor: everything before the contentLen bytes of tensor_content
// (including that field's tag and length when contentLen > 0).
func (h *chunkHead) appendPrefix(b []byte, contentLen int) []byte {
	b = appendVarintField(b, tagChunkKey, h.key)
	b = appendTag(b, tagChunkSeq)
	b = protowire.AppendVarint(b, uint64(h.seqLen()))
	b = appendVarintField(b, tagSeqEpisode, h.episode)
	b = appendVarintField(b, tagSeqStart, uint64(int64(h.start)))
	b = appendVarintField(b, tagSeqEnd, uint64(int64(h.end)))
	b = appendBoolField(b, tagSeqSparse, h.sparse)
	b = appendBoolField(b, tagChunkDelta, h.delta)
	tensorLen := h.tensorLen(contentLen)
	b = appendTag(b, tagChunkData)
	b = protowire.AppendVarint(b, uint64(sizeBytesField(tensorLen)))
	b = appendTag(b, tagDataTensors)
	b = protowire.AppendVarint(b, uint64(tensorLen))
	b = appendVarintField(b, tagTensorDtype, uint64(int64(h.dtype)))
	b = appendTag(b, tagTensorShape)
	b = protowire.AppendVarint(b, uint64(h.shapeLen()))
	for _, d := range h.shape {
		b = appendTag(b, tagShapeDim)
		b = protowire.AppendVarint(b, uint64(sizeVarintField(uint64(d))))
		b = appendVarintField(b, tagDimSize, uint64(d))
	}
	if contentLen > 0 {
		b = appendTag(b, tagTensorContent)
		b = protowire.AppendVarint(b, uint64(contentLen))
	}
	return b
}

// chunkSuffixMax bounds the size of appendSuffix's output.
const chunkSuffixMax = 2 + 1 + binary.MaxVarintLen64

// appendSuffix appends the fields that follow the tensor: one tensor, and
// the uncompressed size.
func (h *chunkHead) appendSuffix(b []byte) []byte {
	b = append(b, byte(tagChunkTensorsLen), 1)
	return appendVarintField(b, tagChunkUncompressed, uint64(h.uncompressed))
}

// encodeChunkRaw returns the encoded ChunkData of a chunk of a fixed-size
// dtype whose stacked (and, where it applies, already delta-encoded) element
// bytes are raw. raw is only read: it may be the caller's tensor data. The
// Snappy output is written straight into the returned buffer, between the
// fields that precede and follow it, so the content is copied once.
//
// When pool is not nil the buffer comes from pool. If the encoding may
// reach bigChunkBytes, the buffer is returned as big, a mem.Buffer holding
// one reference, for the caller to free once nothing reads the encoding any
// more; otherwise it is returned as small, for the caller to put back (see
// smallBuf). Without a pool both are nil and the buffer is the garbage
// collector's.
func encodeChunkRaw(h *chunkHead, raw []byte, pool mem.BufferPool) (enc []byte, big mem.Buffer, small *[]byte, err error) {
	if len(raw) > maxSnappyInput {
		return nil, nil, nil, fmt.Errorf("client: tensor of %d bytes is too large for Snappy", len(raw))
	}
	maxContent := snappy.MaxEncodedLen(len(raw))
	if maxContent < 0 {
		return nil, nil, nil, fmt.Errorf("client: tensor of %d bytes is too large for Snappy", len(raw))
	}
	// Varint sizes grow with the value, so the prefix for the largest
	// possible content is at least as long as the real one.
	head := h.prefixLen(maxContent)
	size := head + maxContent + chunkSuffixMax
	var buf []byte
	var bufp *[]byte
	if pool != nil {
		// Pooled buffers are not cleared: every byte of the encoding is
		// written below, and nothing reads past it.
		bufp = pool.Get(size)
		buf = *bufp
	} else {
		buf = make([]byte, size)
	}
	content := snappy.Encode(buf[head:head+maxContent], raw)
	if len(content) > 0 && &content[0] != &buf[head] {
		copy(buf[head:], content) // snappy allocated: not expected, as dst is large enough
	}
	start := head - h.prefixLen(len(content))
	h.appendPrefix(buf[start:start], len(content))
	out := h.appendSuffix(buf[:head+len(content)])
	enc = out[start:len(out):len(out)]
	if bufp == nil {
		return enc, nil, nil, nil
	}
	if size < bigChunkBytes {
		return enc, nil, bufp, nil
	}
	// The buffer as a mem.Buffer of the encoding alone: the bytes before
	// start are split off and their reference dropped.
	*bufp = out
	pre, encBuf := mem.SplitUnsafe(mem.NewBuffer(bufp, pool), start)
	pre.Free()
	return enc, encBuf, nil, nil
}

// smallBuf is the pooled buffer of a chunk encoding below bigChunkBytes.
// Requests copy such encodings into their own buffer, so gRPC never holds
// them; refs counts the holders instead: the writer's chunk, until no item
// or history step uses it, and every request built with the chunk, until
// its marshal has copied it. The last release puts the buffer back.
// gRPC's mem.Buffer cannot do this: it does not count references to
// buffers of 1 KiB and less.
type smallBuf struct {
	refs atomic.Int32
	buf  *[]byte
	pool mem.BufferPool
}

// init makes s hold buf, with one reference.
func (s *smallBuf) init(buf *[]byte, pool mem.BufferPool) {
	s.buf, s.pool = buf, pool
	s.refs.Store(1)
}

func (s *smallBuf) ref() { s.refs.Add(1) }

// release drops a reference. The bytes must not be read afterwards.
func (s *smallBuf) release() {
	switch n := s.refs.Add(-1); {
	case n == 0:
		s.pool.Put(s.buf)
	case n < 0:
		panic("client: chunk encoding buffer released more often than referenced")
	}
}

// encodeChunkStrings returns the encoded ChunkData of a DT_STRING chunk
// whose stacked elements are strs (only read).
func encodeChunkStrings(h *chunkHead, strs [][]byte) ([]byte, error) {
	contentLen := 0
	for i, s := range strs {
		if int64(len(s)) > math.MaxUint32 {
			return nil, fmt.Errorf("client: string element %d has %d bytes; at most 2^32-1 are encodable", i, len(s))
		}
		contentLen += sizeVarint(uint64(len(s))) + len(s)
	}
	var scratch [128]byte
	pre := h.appendPrefix(scratch[:0], contentLen)
	buf := make([]byte, 0, len(pre)+contentLen+chunkSuffixMax)
	buf = append(buf, pre...)
	for _, s := range strs {
		buf = protowire.AppendVarint(buf, uint64(len(s)))
	}
	for _, s := range strs {
		buf = append(buf, s...)
	}
	buf = h.appendSuffix(buf)
	return buf[:len(buf):len(buf)], nil
}

// itemSlice is one chunk slice of an item's column while it is encoded.
type itemSlice struct {
	key            uint64
	offset, length int32
}

func (s *itemSlice) size() int {
	return sizeVarintField(s.key) + sizeVarintField(uint64(int64(s.offset))) + sizeVarintField(uint64(int64(s.length)))
}

// encodeItem returns the encoded PrioritizedItem of a writer item: its key,
// table, priority and flat_trajectory, whose column i is made of the
// slices[colEnd[i-1]:colEnd[i]] and is squeezed when squeeze[i] is set.
func encodeItem(key uint64, table string, priority float64, slices []itemSlice, colEnd []int, squeeze []bool) []byte {
	colLen := func(i int) int {
		from := 0
		if i > 0 {
			from = colEnd[i-1]
		}
		n := sizeBoolField(squeeze[i])
		for j := from; j < colEnd[i]; j++ {
			n += sizeBytesField(slices[j].size())
		}
		return n
	}
	trajLen := 0
	for i := range colEnd {
		trajLen += sizeBytesField(colLen(i))
	}
	n := sizeVarintField(key) + sizeBytesField(trajLen)
	if table != "" {
		n += sizeBytesField(len(table))
	}
	if math.Float64bits(priority) != 0 {
		n += 9
	}
	b := make([]byte, 0, n)
	b = appendVarintField(b, tagItemKey, key)
	if table != "" {
		b = appendTag(b, tagItemTable)
		b = protowire.AppendString(b, table)
	}
	if math.Float64bits(priority) != 0 {
		b = appendTag(b, tagItemPriority)
		b = protowire.AppendFixed64(b, math.Float64bits(priority))
	}
	b = appendTag(b, tagItemTrajectory)
	b = protowire.AppendVarint(b, uint64(trajLen))
	from := 0
	for i, end := range colEnd {
		b = appendTag(b, tagTrajColumn)
		b = protowire.AppendVarint(b, uint64(colLen(i)))
		for j := from; j < end; j++ {
			s := &slices[j]
			b = appendTag(b, tagColumnSlice)
			b = protowire.AppendVarint(b, uint64(s.size()))
			b = appendVarintField(b, tagSliceKey, s.key)
			b = appendVarintField(b, tagSliceOffset, uint64(int64(s.offset)))
			b = appendVarintField(b, tagSliceLength, uint64(int64(s.length)))
		}
		b = appendBoolField(b, tagColumnSqueeze, squeeze[i])
		from = end
	}
	return b
}

// insertRequest is an InsertStreamRequest made of already encoded chunks
// and items. streamCodec sends it; its encodings must not be modified once
// it is built, since gRPC may still read them after SendMsg returns.
type insertRequest struct {
	chunks [][]byte // encoded ChunkData
	items  [][]byte // encoded PrioritizedItem
	keep   []uint64 // keep_chunk_keys
	// bufs[i], when not nil, is a reference to the pooled buffer of
	// chunks[i], which marshal hands over to gRPC.
	bufs []mem.Buffer
	// smalls are references to the pooled buffers of small chunks, which
	// marshal releases once it has copied them.
	smalls []*smallBuf
}

// releaseSmall drops the request's references to small chunk buffers.
func (r *insertRequest) releaseSmall() {
	for _, s := range r.smalls {
		s.release()
	}
	clear(r.smalls)
	r.smalls = r.smalls[:0]
}

// bigChunkBytes is the size from which a chunk's encoding is handed to gRPC
// as it is rather than copied into the request's buffer.
const bigChunkBytes = 16 << 10

// keepLen is the size of the packed keep_chunk_keys content.
func (r *insertRequest) keepLen() int {
	n := 0
	for _, k := range r.keep {
		n += sizeVarint(k)
	}
	return n
}

// size returns the size of the encoded request.
func (r *insertRequest) size() int {
	n := 0
	for _, c := range r.chunks {
		n += sizeBytesField(len(c))
	}
	for _, it := range r.items {
		n += sizeBytesField(len(it))
	}
	if len(r.keep) > 0 {
		n += sizeBytesField(r.keepLen())
	}
	return n
}

// appendTo appends the encoded request to b.
func (r *insertRequest) appendTo(b []byte) []byte {
	for _, c := range r.chunks {
		b = appendTag(b, tagRequestChunks)
		b = protowire.AppendBytes(b, c)
	}
	return r.appendTail(b)
}

// appendTail appends the items and keep_chunk_keys.
func (r *insertRequest) appendTail(b []byte) []byte {
	for _, it := range r.items {
		b = appendTag(b, tagRequestItems)
		b = protowire.AppendBytes(b, it)
	}
	if len(r.keep) > 0 {
		b = appendTag(b, tagRequestKeep)
		b = protowire.AppendVarint(b, uint64(r.keepLen()))
		for _, k := range r.keep {
			b = protowire.AppendVarint(b, k)
		}
	}
	return b
}

// marshal returns the encoded request as gRPC buffers: the tags, lengths
// and small encodings copied into one buffer from pool, split around the
// encodings of big chunks, which are referenced without copying. It drops
// the request's references to small encodings' buffers once they are
// copied, so a request is marshalled once.
func (r *insertRequest) marshal(pool mem.BufferPool) mem.BufferSlice {
	total := r.size()
	small, nbig := total, 0
	for _, c := range r.chunks {
		if len(c) >= bigChunkBytes {
			small -= len(c)
			nbig++
		}
	}
	var buf *[]byte
	if mem.IsBelowBufferPoolingThreshold(small) {
		b := make([]byte, 0, small)
		buf = &b
	} else {
		buf = pool.Get(small)
	}
	b := (*buf)[:0]
	if nbig == 0 {
		b = r.appendTo(b)
		*buf = b
		r.releaseSmall()
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}
	}
	// cuts[i] is where the small part before big chunk i ends in b.
	cuts := make([]int, 0, nbig)
	for _, c := range r.chunks {
		b = appendTag(b, tagRequestChunks)
		if len(c) >= bigChunkBytes {
			b = protowire.AppendVarint(b, uint64(len(c)))
			cuts = append(cuts, len(b))
		} else {
			b = protowire.AppendBytes(b, c)
		}
	}
	b = r.appendTail(b)
	*buf = b
	r.releaseSmall()
	out := make(mem.BufferSlice, 0, 2*nbig+1)
	rest := mem.NewBuffer(buf, pool)
	prev, i := 0, 0
	for j, c := range r.chunks {
		if len(c) < bigChunkBytes {
			continue
		}
		var part mem.Buffer
		part, rest = mem.SplitUnsafe(rest, cuts[i]-prev)
		var big mem.Buffer = mem.SliceBuffer(c)
		if j < len(r.bufs) && r.bufs[j] != nil {
			big, r.bufs[j] = r.bufs[j], nil // gRPC frees it
		}
		out = append(out, part, big)
		prev = cuts[i]
		i++
	}
	if rest.Len() > 0 {
		out = append(out, rest)
	} else {
		rest.Free()
	}
	return out
}

// protoCodec is gRPC's own codec, for every message the client's codecs do
// not handle themselves.
var protoCodec = encoding.GetCodecV2(grpcproto.Name)

// streamCodec is the codec of the writer's insert streams and the
// sampler's sample streams: it sends *insertRequest values as they are,
// decodes *sampleResponse and *insertResponse values by hand, and leaves
// every other message to gRPC's proto codec. Its name is "proto", as that
// codec's: the messages on the wire are the same.
type streamCodec struct{}

func (streamCodec) Name() string { return grpcproto.Name }

func (streamCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*insertRequest); ok {
		return r.marshal(wirePool), nil
	}
	return protoCodec.Marshal(v)
}

func (streamCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch r := v.(type) {
	case *sampleResponse:
		// The tensors' contents reference buf: the response keeps it.
		buf := data.MaterializeToBuffer(wirePool)
		if err := r.decode(buf.ReadOnlyData()); err != nil {
			buf.Free()
			r.entries = nil
			return err
		}
		r.buf = buf
		return nil
	case *insertResponse:
		buf := data.MaterializeToBuffer(wirePool)
		defer buf.Free()
		return r.decode(buf.ReadOnlyData())
	}
	return protoCodec.Unmarshal(data, v)
}

// wirePool holds the buffers of encoded requests, of responses split over
// several gRPC buffers, and the transport's read buffers (Dial passes it
// to gRPC). Unlike gRPC's default pool it does not clear buffers: their
// users overwrite every byte they read.
var wirePool = &bufpool.Pool{}

var _ mem.BufferPool = wirePool
