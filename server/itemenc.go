package server

import (
	"math"
	"time"

	"github.com/reverie-rl/reverie/internal/table"
	"google.golang.org/protobuf/encoding/protowire"
)

// Hand encoders for the messages the sample path and checkpoints send for
// every item. They produce exactly what proto.Marshal produces for the same
// message (proto3: zero scalars left out, fields in number order), around
// the item's stored trajectory encoding, so nothing is decoded or walked
// twice; itemenc_test.go checks them against proto.Marshal.

// PrioritizedItem field numbers.
const (
	itemKeyField          = 1
	itemTableField        = 2
	itemPriorityField     = 5
	itemTimesSampledField = 6
	itemInsertedAtField   = 7
	itemTrajectoryField   = 8
)

// SampleInfo field numbers.
const (
	infoItemField        = 1
	infoProbabilityField = 2
	infoTableSizeField   = 3
	infoRateLimitedField = 4
)

// appendItem appends the encoding of it as a PrioritizedItem of table
// tableName.
func appendItem(b []byte, tableName string, it *table.Item) []byte {
	if it.Key != 0 {
		b = protowire.AppendTag(b, itemKeyField, protowire.VarintType)
		b = protowire.AppendVarint(b, it.Key)
	}
	if tableName != "" {
		b = protowire.AppendTag(b, itemTableField, protowire.BytesType)
		b = protowire.AppendString(b, tableName)
	}
	if bits := math.Float64bits(it.Priority); bits != 0 {
		b = protowire.AppendTag(b, itemPriorityField, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, bits)
	}
	if it.TimesSampled != 0 {
		b = protowire.AppendTag(b, itemTimesSampledField, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(it.TimesSampled)))
	}
	// inserted_at is always set (a zero Timestamp is still a message).
	t := time.Unix(0, it.InsertedAt)
	secs, nanos := t.Unix(), int32(t.Nanosecond())
	n := 0
	if secs != 0 {
		n += 1 + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	b = protowire.AppendTag(b, itemInsertedAtField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if secs != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(nanos)))
	}
	if it.Trajectory != nil {
		b = protowire.AppendTag(b, itemTrajectoryField, protowire.BytesType)
		b = protowire.AppendBytes(b, it.Trajectory)
	}
	return b
}

// appendSampleInfo appends the encoding of sm's SampleInfo.
func appendSampleInfo(b []byte, tableName string, sm *table.Sampled) []byte {
	b = protowire.AppendTag(b, infoItemField, protowire.BytesType)
	// The item's length prefix is written once the item is, in the
	// varint's final size: reserve one byte, and move the item if its
	// length needs more.
	at := len(b)
	b = append(b, 0)
	b = appendItem(b, tableName, &sm.Item)
	n := len(b) - at - 1
	if k := protowire.SizeVarint(uint64(n)); k > 1 {
		b = append(b, make([]byte, k-1)...)
		copy(b[at+k:], b[at+1:at+1+n])
	}
	protowire.AppendVarint(b[at:at], uint64(n))
	if bits := math.Float64bits(sm.Probability); bits != 0 {
		b = protowire.AppendTag(b, infoProbabilityField, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, bits)
	}
	if sm.TableSize != 0 {
		b = protowire.AppendTag(b, infoTableSizeField, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(sm.TableSize))
	}
	if sm.RateLimited {
		b = protowire.AppendTag(b, infoRateLimitedField, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}
