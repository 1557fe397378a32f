package chunkstore

import (
	"errors"
	"fmt"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// Meta is what the store keeps of a chunk besides its encoding: what insert
// validation and the tables need, so that they never read the data.
type Meta struct {
	// Key is the chunk_key.
	Key uint64
	// Episode is sequence_range.episode_id.
	Episode uint64
	// Rows is the leading dimension of each tensor of data.tensors, -1
	// where the shape does not say (no dimensions, or a negative size).
	Rows []int64
}

// MetaOf reads the metadata of a decoded chunk.
func MetaOf(data *reverbpb.ChunkData) Meta {
	ts := data.GetData().GetTensors()
	rows := make([]int64, len(ts))
	for i, t := range ts {
		rows[i] = -1
		if dims := t.GetTensorShape().GetDim(); len(dims) > 0 && dims[0].GetSize() >= 0 {
			rows[i] = dims[0].GetSize()
		}
	}
	return Meta{Key: data.GetChunkKey(), Episode: data.GetSequenceRange().GetEpisodeId(), Rows: rows}
}

// Field numbers of the ChunkData fields ParseMeta reads (proto/deepmind/
// reverb/schema.proto and proto/tensorflow).
const (
	chunkKeyField     = 1 // ChunkData.chunk_key
	chunkRangeField   = 2 // ChunkData.sequence_range
	chunkDataField    = 5 // ChunkData.data
	rangeEpisodeField = 1 // SequenceRange.episode_id
	dataTensorsField  = 1 // ChunkData.Data.tensors
	tensorShapeField  = 2 // TensorProto.tensor_shape
	shapeDimField     = 2 // TensorShapeProto.dim
	dimSizeField      = 1 // TensorShapeProto.Dim.size
)

var errMeta = errors.New("chunkstore: invalid chunk encoding")

// ParseMeta reads the metadata of a chunk from its encoding, as
// proto.Unmarshal would decode it (the last occurrence of a scalar wins,
// occurrences of a message field merge), without decoding the rest. It
// checks only the wire structure of what it reads: callers that keep enc
// should check all of it first (internal/pbvalid).
func ParseMeta(enc []byte) (Meta, error) {
	var m Meta
	err := walk(enc, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == chunkKeyField && typ == protowire.VarintType:
			m.Key = x
		case num == chunkRangeField && typ == protowire.BytesType:
			return walk(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				if num == rangeEpisodeField && typ == protowire.VarintType {
					m.Episode = x
				}
				return nil
			})
		case num == chunkDataField && typ == protowire.BytesType:
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != dataTensorsField || typ != protowire.BytesType {
					return nil
				}
				rows, err := tensorRows(v)
				m.Rows = append(m.Rows, rows)
				return err
			})
		}
		return nil
	})
	if err != nil {
		return Meta{}, err
	}
	return m, nil
}

// tensorRows reads the leading dimension of an encoded TensorProto: the
// size of the first dim across all occurrences of tensor_shape, or -1.
func tensorRows(enc []byte) (int64, error) {
	rows, seen := int64(-1), false
	err := walk(enc, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != tensorShapeField || typ != protowire.BytesType {
			return nil
		}
		return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num != shapeDimField || typ != protowire.BytesType || seen {
				return nil
			}
			rows, seen = 0, true
			return walk(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				if num == dimSizeField && typ == protowire.VarintType {
					rows = int64(x)
				}
				return nil
			})
		})
	})
	return max(rows, -1), err
}

// walk calls f for each field of the encoded message b, with the value of
// a length-delimited field in v and of a varint in x.
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errMeta, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", errMeta, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
