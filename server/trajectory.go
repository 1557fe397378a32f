package server

import (
	"iter"

	"github.com/reverie-rl/reverie/internal/pbwire"
	"google.golang.org/protobuf/encoding/protowire"
)

// Readers of an encoded deepmind.reverb.FlatTrajectory, which the server
// keeps and checks without decoding it into messages. Each takes bytes
// that pbvalid accepted as a FlatTrajectory (or a part of one), so the
// wire format is known to be well formed; they decode as proto.Unmarshal
// would: a field in an unexpected wire type is unknown and skipped, each
// occurrence of a repeated message field is one more element, and the last
// occurrence of a scalar wins.

// FlatTrajectory, Column and ChunkSlice field numbers.
const (
	trajColumnsField   = 1
	columnSlicesField  = 1
	columnSqueezeField = 2
	sliceChunkKeyField = 1
	sliceOffsetField   = 2
	sliceLengthField   = 3
	sliceIndexField    = 4
)

// trajSlice is a decoded FlatTrajectory.ChunkSlice.
type trajSlice struct {
	chunkKey              uint64
	offset, length, index int32
}

// nextMessage returns the value of the next occurrence of field num, in
// the bytes wire type, in the message encoding b, and what follows it; ok
// is false when there is none.
func nextMessage(b []byte, num protowire.Number) (val, rest []byte, ok bool) {
	for len(b) > 0 {
		n, typ, k, ok := pbwire.Tag(b)
		if !ok {
			if n, typ, k = protowire.ConsumeTag(b); k < 0 {
				return nil, nil, false
			}
		}
		b = b[k:]
		if n == num && typ == protowire.BytesType {
			v, k, ok := pbwire.Bytes(b)
			if !ok {
				if v, k = protowire.ConsumeBytes(b); k < 0 {
					return nil, nil, false
				}
			}
			return v, b[k:], true
		}
		k = protowire.ConsumeFieldValue(n, typ, b)
		if k < 0 {
			return nil, nil, false
		}
		b = b[k:]
	}
	return nil, nil, false
}

// columnSqueeze returns the squeeze flag of the encoded Column col and its
// number of chunk slices.
func columnSqueeze(col []byte) (squeeze bool, slices int) {
	for len(col) > 0 {
		n, typ, k, ok := pbwire.Tag(col)
		if !ok {
			if n, typ, k = protowire.ConsumeTag(col); k < 0 {
				break
			}
		}
		col = col[k:]
		switch {
		case n == columnSqueezeField && typ == protowire.VarintType:
			v, k := protowire.ConsumeVarint(col)
			if k < 0 {
				return squeeze, slices
			}
			squeeze = protowire.DecodeBool(v)
			col = col[k:]
			continue
		case n == columnSlicesField && typ == protowire.BytesType:
			slices++
		}
		k = protowire.ConsumeFieldValue(n, typ, col)
		if k < 0 {
			break
		}
		col = col[k:]
	}
	return squeeze, slices
}

// parseSlice decodes the encoded ChunkSlice b.
func parseSlice(b []byte) trajSlice {
	var s trajSlice
	for len(b) > 0 {
		n, typ, k, ok := pbwire.Tag(b)
		if !ok {
			if n, typ, k = protowire.ConsumeTag(b); k < 0 {
				break
			}
		}
		b = b[k:]
		if typ == protowire.VarintType && n >= sliceChunkKeyField && n <= sliceIndexField {
			v, k, ok := pbwire.Varint(b)
			if !ok {
				if v, k = protowire.ConsumeVarint(b); k < 0 {
					break
				}
			}
			b = b[k:]
			switch n {
			case sliceChunkKeyField:
				s.chunkKey = v
			case sliceOffsetField:
				s.offset = int32(v)
			case sliceLengthField:
				s.length = int32(v)
			case sliceIndexField:
				s.index = int32(v)
			}
			continue
		}
		k = protowire.ConsumeFieldValue(n, typ, b)
		if k < 0 {
			break
		}
		b = b[k:]
	}
	return s
}

// slicesOf yields every chunk slice of the encoded FlatTrajectory traj, in
// order.
func slicesOf(traj []byte) iter.Seq[trajSlice] {
	return func(yield func(trajSlice) bool) {
		for rest := traj; ; {
			col, r, ok := nextMessage(rest, trajColumnsField)
			if !ok {
				return
			}
			rest = r
			for cr := col; ; {
				sl, r, ok := nextMessage(cr, columnSlicesField)
				if !ok {
					break
				}
				cr = r
				if !yield(parseSlice(sl)) {
					return
				}
			}
		}
	}
}
