package server

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/bufpool"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/pbvalid"
	"github.com/reverie-rl/reverie/internal/pbwire"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// codec is the server's gRPC codec. It is gRPC's proto codec except for two
// types the hot paths use to keep chunk bytes as they arrived:
//
//   - *insertRequest, an InsertStreamRequest decoded by hand: each chunk is
//     kept as its encoding (copied once out of gRPC's buffers, which are
//     recycled after Unmarshal), and only its metadata is read;
//   - *rawMessage, a message already encoded (a SampleStreamResponse built
//     from stored chunk bytes), sent as it is.
type codec struct {
	proto  encoding.CodecV2
	chunks *chunkstore.Store // large chunks are copied into its buffers
}

func newCodec(chunks *chunkstore.Store) *codec {
	return &codec{proto: encoding.GetCodecV2(protocodec.Name), chunks: chunks}
}

// Name is the proto codec's: the wire format does not change.
func (c *codec) Name() string { return protocodec.Name }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*rawMessage); ok {
		return m.data, nil
	}
	return c.proto.Marshal(v)
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*insertRequest); ok {
		m.decodeInto(data, c.chunks)
		return nil // a decoding error is in m.err, for the handler to report
	}
	err := c.proto.Unmarshal(data, v)
	if m, ok := v.(proto.Message); ok && err != nil && isReverbRequest(m) {
		setDecodeError(data, m, err) // for the handler to report (decode.go)
		return nil
	}
	return err
}

// transportPool holds gRPC's read buffers. Unlike gRPC's default pool it
// does not zero them: the transport overwrites every byte it reads, and
// the codec copies out what it keeps.
var transportPool = &bufpool.Pool{}

var _ mem.BufferPool = transportPool

// rawMessage is an encoded message; gRPC sends data and then frees it.
type rawMessage struct {
	data mem.BufferSlice
}

// insertRequest is an InsertStreamRequest whose chunks stay encoded.
type insertRequest struct {
	chunks []encodedChunk
	items  []wireItem
	keep   []uint64 // keep_chunk_keys
	// lastTable is the table the last item named.
	lastTable string
	// err is the first problem found decoding the request; it wraps
	// ErrInvalidRequest and names the field. The other fields then hold
	// what was decoded before it.
	err error
	// reader decodes the request; its slices are reused for the next one
	// (a 400 kB request arrives in 25 of gRPC's buffers, and growing the
	// list of them anew was a quarter of the server's garbage per item).
	reader sliceReader
}

// reset empties m for the next request, keeping its slices' capacity, and
// reports whether m is worth keeping: slices grown for an unusually large
// request are not.
func (m *insertRequest) reset() bool {
	const maxKept = 4096
	if cap(m.chunks) > maxKept || cap(m.items) > maxKept || cap(m.keep) > maxKept ||
		cap(m.reader.bufs) > maxKept || cap(m.reader.views) > maxKept || cap(m.reader.tmp) > maxKept<<10 {
		return false
	}
	clear(m.chunks) // drop the references to chunk and trajectory bytes
	clear(m.items)
	m.chunks, m.items, m.keep, m.err = m.chunks[:0], m.items[:0], m.keep[:0], nil
	return true
}

// wireItem is what the server reads of an inserted PrioritizedItem:
// times_sampled and inserted_at are the table's to set, and the trajectory
// stays encoded.
type wireItem struct {
	key      uint64
	table    string
	priority float64
	// traj is the encoding of flat_trajectory, owned. A field sent in
	// several parts is their concatenation, which decodes as proto merges
	// the parts.
	traj []byte
}

// encodedChunk is one chunks entry: its bytes, owned, and its metadata.
type encodedChunk struct {
	meta chunkstore.Meta
	enc  []byte
	// fromStore: enc came from the chunk store's AllocChunk, for
	// InsertOwned.
	fromStore bool
}

// InsertStreamRequest field numbers.
const (
	insertChunksField = 1
	insertItemsField  = 2
	insertKeepField   = 3
)

var (
	chunkValidator = pbvalid.For((&reverbpb.ChunkData{}).ProtoReflect().Descriptor())
	itemValidator  = pbvalid.For((&reverbpb.PrioritizedItem{}).ProtoReflect().Descriptor())
)

// decodeInto reads an encoded InsertStreamRequest into m as proto.Unmarshal
// would decode it, with the chunks kept as bytes: fields in an unexpected
// wire type are skipped as unknown, and a chunk is accepted exactly when
// it would decode. Any failure is recorded in m.err. The bytes of large
// chunks are copied into buffers from store (AllocChunk) if it is not nil.
func (m *insertRequest) decodeInto(data mem.BufferSlice, store *chunkstore.Store) {
	r := &m.reader
	r.init(data)
	r.store = store
	if err := m.decodeFrom(r); err != nil {
		m.err = fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	// gRPC frees data once Unmarshal returns.
	r.release()
}

func (m *insertRequest) decodeFrom(r *sliceReader) error {
	for r.len() > 0 {
		at := r.offset()
		tag, err := r.varint()
		if err != nil {
			return fmt.Errorf("tag at byte %d: %w", at, err)
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			return fmt.Errorf("tag at byte %d: invalid field number %d", at, num)
		}
		switch typ {
		case protowire.VarintType:
			x, err := r.varint()
			if err != nil {
				return fmt.Errorf("field %d at byte %d: %w", num, at, err)
			}
			if num == insertKeepField {
				m.keep = append(m.keep, x)
			}
		case protowire.Fixed32Type, protowire.Fixed64Type:
			n := 4
			if typ == protowire.Fixed64Type {
				n = 8
			}
			if err := r.skip(n); err != nil {
				return fmt.Errorf("field %d at byte %d: %w", num, at, err)
			}
		case protowire.BytesType:
			n, err := r.varint()
			if err == nil && n > uint64(r.len()) {
				err = errTruncated
			}
			if err != nil {
				return fmt.Errorf("%s at byte %d: %w", m.fieldName(num), at, err)
			}
			if err := m.decodeBytesField(num, r, int(n)); err != nil {
				return err
			}
		case protowire.StartGroupType:
			// Never sent by a Reverb client; skipped as proto.Unmarshal
			// does.
			if err := r.skipGroup(num); err != nil {
				return fmt.Errorf("field %d at byte %d: %w", num, at, err)
			}
		default:
			return fmt.Errorf("field %d at byte %d: invalid wire type %d", num, at, typ)
		}
	}
	return nil
}

// fieldName names the next occurrence of field num, for errors.
func (m *insertRequest) fieldName(num protowire.Number) string {
	switch num {
	case insertChunksField:
		return fmt.Sprintf("chunks[%d]", len(m.chunks))
	case insertItemsField:
		return fmt.Sprintf("items[%d]", len(m.items))
	case insertKeepField:
		return "keep_chunk_keys"
	}
	return fmt.Sprintf("field %d", num)
}

// decodeBytesField reads the n-byte value of a length-delimited field.
func (m *insertRequest) decodeBytesField(num protowire.Number, r *sliceReader, n int) error {
	switch num {
	case insertChunksField:
		enc, fromStore := r.copyChunk(n)
		if err := chunkValidator.Check(enc); err != nil {
			if e := new(pbvalid.Error); errors.As(err, &e) && e.Path != "" {
				return fmt.Errorf("%s.%v", m.fieldName(num), err)
			}
			return fmt.Errorf("%s: %v", m.fieldName(num), err)
		}
		meta, err := chunkstore.ParseMeta(enc)
		if err != nil {
			return fmt.Errorf("%s: %v", m.fieldName(num), err) // unreachable after Check
		}
		m.chunks = append(m.chunks, encodedChunk{meta: meta, enc: enc, fromStore: fromStore})
	case insertItemsField:
		b := r.next(n)
		if err := itemValidator.Check(b); err != nil {
			if e := new(pbvalid.Error); errors.As(err, &e) && e.Path != "" {
				return fmt.Errorf("%s.%v", m.fieldName(num), err)
			}
			return fmt.Errorf("%s: %v", m.fieldName(num), err)
		}
		m.items = append(m.items, m.decodeItem(b))
	case insertKeepField:
		for b := r.next(n); len(b) > 0; {
			x, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return fmt.Errorf("keep_chunk_keys: packed: %w", protowire.ParseError(k))
			}
			m.keep = append(m.keep, x)
			b = b[k:]
		}
	default:
		return r.skip(n)
	}
	return nil
}

// decodeItem reads b, an encoded PrioritizedItem that itemValidator
// accepted, as proto.Unmarshal would: the last occurrence of a scalar wins,
// and a field in another wire type than its own is unknown.
func (m *insertRequest) decodeItem(b []byte) wireItem {
	var it wireItem
	for len(b) > 0 {
		num, typ, n, ok := pbwire.Tag(b)
		if !ok {
			num, typ, n = protowire.ConsumeTag(b)
		}
		b = b[n:]
		switch {
		case num == itemKeyField && typ == protowire.VarintType:
			it.key, n = protowire.ConsumeVarint(b)
		case num == itemTableField && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			it.table = m.tableName(v)
		case num == itemPriorityField && typ == protowire.Fixed64Type:
			var v uint64
			v, n = protowire.ConsumeFixed64(b)
			it.priority = math.Float64frombits(v)
		case num == itemTrajectoryField && typ == protowire.BytesType:
			var v []byte
			if v, n, ok = pbwire.Bytes(b); !ok {
				v, n = protowire.ConsumeBytes(b)
			}
			it.traj = append(it.traj, v...)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		b = b[n:] // n >= 0: the encoding was checked
	}
	return it
}

// tableName returns b as a string, reusing the previous item's when equal
// (a request's items usually name one table).
func (m *insertRequest) tableName(b []byte) string {
	if string(b) != m.lastTable {
		m.lastTable = string(b)
	}
	return m.lastTable
}

var errTruncated = errors.New("unexpected end of message")

// sliceReader reads a mem.BufferSlice front to back without first joining
// its buffers into one (gRPC splits a large message into many).
// Its slices are kept from one message to the next (init, release).
type sliceReader struct {
	cur  []byte   // what is left of the current buffer
	rest [][]byte // the buffers after it
	bufs [][]byte // every buffer of the message: rest's backing array
	// owners are the mem.Buffers of bufs, and at is the index of cur's.
	owners []mem.Buffer
	at     int
	n      int      // bytes left in all
	read   int      // bytes read so far
	tmp    []byte   // holds values that span buffers
	views  [][]byte // scratch for copy
	// store, if not nil, provides the buffers of large chunks (copyChunk).
	store *chunkstore.Store
}

// init makes r read data from its start, reusing r's slices.
func (r *sliceReader) init(data mem.BufferSlice) {
	bufs, owners := r.bufs[:0], r.owners[:0]
	n := 0
	for _, b := range data {
		if d := b.ReadOnlyData(); len(d) > 0 {
			bufs = append(bufs, d)
			owners = append(owners, b)
			n += len(d)
		}
	}
	*r = sliceReader{rest: bufs, bufs: bufs, owners: owners, at: -1, n: n, tmp: r.tmp[:0], views: r.views[:0]}
}

// release drops r's references to the message's buffers, which gRPC
// reuses once Unmarshal returns, keeping the slices for the next init.
func (r *sliceReader) release() {
	clear(r.bufs)
	clear(r.owners)
	clear(r.views[:cap(r.views)])
	r.cur, r.rest, r.bufs, r.owners, r.views, r.store = nil, nil, r.bufs[:0], r.owners[:0], r.views[:0], nil
}

func (r *sliceReader) len() int    { return r.n }
func (r *sliceReader) offset() int { return r.read }

// maxGroupDepth bounds how deep groups nest, as proto.Unmarshal's default
// recursion limit does.
const maxGroupDepth = protowire.DefaultRecursionLimit

// skipGroup reads the rest of a group of field num whose start tag was just
// read, up to its end tag, in place: each byte once. (It used to join the
// rest of the request into one slice and copy what followed the group,
// which made a request of many small groups cost time quadratic in its
// size: minutes of CPU for a megabyte.)
func (r *sliceReader) skipGroup(num protowire.Number) error {
	open := []protowire.Number{num}
	for len(open) > 0 {
		tag, err := r.varint()
		if err != nil {
			return err
		}
		n, typ := protowire.DecodeTag(tag)
		if n < protowire.MinValidNumber || n > protowire.MaxValidNumber {
			return fmt.Errorf("invalid field number %d in a group", n)
		}
		switch typ {
		case protowire.VarintType:
			_, err = r.varint()
		case protowire.Fixed32Type:
			err = r.skip(4)
		case protowire.Fixed64Type:
			err = r.skip(8)
		case protowire.BytesType:
			var l uint64
			if l, err = r.varint(); err == nil {
				if l > uint64(r.len()) {
					err = errTruncated
				} else {
					err = r.skip(int(l))
				}
			}
		case protowire.StartGroupType:
			if len(open) == maxGroupDepth {
				return errors.New("groups nested too deep")
			}
			open = append(open, n)
		case protowire.EndGroupType:
			if n != open[len(open)-1] {
				return fmt.Errorf("end of group %d where group %d is open", n, open[len(open)-1])
			}
			open = open[:len(open)-1]
		default:
			return fmt.Errorf("invalid wire type %d in a group", typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fill makes cur non-empty unless everything was read.
func (r *sliceReader) fill() {
	for len(r.cur) == 0 && len(r.rest) > 0 {
		r.cur, r.rest = r.rest[0], r.rest[1:]
		r.at++
	}
}

func (r *sliceReader) varint() (uint64, error) {
	r.fill()
	x, k := protowire.ConsumeVarint(r.cur)
	if k < 0 && len(r.cur) < binaryMaxVarintLen && r.n > len(r.cur) {
		// The varint may go on in the next buffer.
		var buf [binaryMaxVarintLen]byte
		b := r.peek(buf[:min(r.n, binaryMaxVarintLen)])
		x, k = protowire.ConsumeVarint(b)
	}
	if k < 0 {
		return 0, protowire.ParseError(k)
	}
	r.skip(k)
	return x, nil
}

const binaryMaxVarintLen = 10

// peek fills dst from the next bytes without reading them.
func (r *sliceReader) peek(dst []byte) []byte {
	n := copy(dst, r.cur)
	for _, b := range r.rest {
		if n == len(dst) {
			break
		}
		n += copy(dst[n:], b)
	}
	return dst[:n]
}

// skip reads n bytes and drops them.
func (r *sliceReader) skip(n int) error {
	if n > r.n {
		return errTruncated
	}
	r.n -= n
	r.read += n
	for n > 0 {
		r.fill()
		k := min(n, len(r.cur))
		r.cur = r.cur[k:]
		n -= k
	}
	return nil
}

// next reads n <= len() bytes and returns them: a view of gRPC's buffer, or
// a copy when they span buffers. Either is valid only until the next call
// and the end of Unmarshal.
func (r *sliceReader) next(n int) []byte {
	r.fill()
	if n <= len(r.cur) {
		b := r.cur[:n]
		r.skip(n)
		return b
	}
	r.tmp = r.tmp[:0]
	for _, v := range r.viewList(n) {
		r.tmp = append(r.tmp, v...)
	}
	return r.tmp
}

// copyChunk reads n <= len() bytes of a chunk's encoding into a buffer of
// r.store's if it has one for n bytes (then fromStore), else as copy does.
func (r *sliceReader) copyChunk(n int) (b []byte, fromStore bool) {
	if b := r.take(n); b != nil {
		return b, true
	}
	if r.store != nil {
		if b = r.store.AllocChunk(n); b != nil {
			k := 0
			for _, v := range r.viewList(n) {
				k += copy(b[k:], v)
			}
			return b, true
		}
	}
	return r.copy(n), false
}

// take reads n bytes of a chunk's encoding without copying them, if they
// begin a buffer of the message and fill most of it: reverie's own
// transport reads a request of one large chunk so (splitInsert), into a
// buffer the chunk store gave. The buffer is then the chunk's: it is
// referenced once more, so that freeing the message does not give it back
// to its pool. It returns nil, reading nothing, otherwise.
func (r *sliceReader) take(n int) []byte {
	r.fill()
	if n < chunkstore.RecycleMinBytes || n > len(r.cur) || len(r.cur)-n > maxTakeSlack ||
		r.at < 0 || r.at >= len(r.bufs) || !r.atBufferStart() {
		return nil
	}
	r.owners[r.at].Ref()
	b := r.cur[:n]
	r.skip(n)
	return b
}

// maxTakeSlack bounds the bytes after a taken chunk in its buffer (the
// request's items), which stay in memory as long as the chunk.
const maxTakeSlack = 4 << 10

// atBufferStart reports whether cur is the whole of its buffer (and not,
// say, a copy made by reset).
func (r *sliceReader) atBufferStart() bool {
	whole := r.bufs[r.at]
	return len(r.cur) == len(whole) && &r.cur[0] == &whole[0]
}

// copy reads n <= len() bytes into a new slice.
func (r *sliceReader) copy(n int) []byte {
	r.fill()
	if n <= len(r.cur) {
		b := append([]byte(nil), r.cur[:n]...)
		r.skip(n)
		return b
	}
	// Join allocates without zeroing what it is about to overwrite.
	return bytes.Join(r.viewList(n), nil)
}

// viewList reads n bytes, returned as views of the buffers they lie in.
func (r *sliceReader) viewList(n int) [][]byte {
	r.views = r.views[:0]
	r.n -= n
	r.read += n
	for n > 0 {
		r.fill()
		k := min(n, len(r.cur))
		r.views = append(r.views, r.cur[:k])
		r.cur = r.cur[k:]
		n -= k
	}
	return r.views
}
