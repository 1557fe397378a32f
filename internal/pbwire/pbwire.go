// Package pbwire has inlinable fast paths of protowire's decoders for the
// one-byte tags, varints and lengths that most fields of reverie's
// messages have (field numbers 1-15, small values, short bytes).
// protowire's functions do not inline, and on the insert path their calls
// cost more than the decoding. Each function here reports false when it
// cannot decode b alone; the caller then calls protowire, which returns
// the same as these whenever they succeed:
//
//	num, typ, n, ok := pbwire.Tag(b)
//	if !ok {
//		num, typ, n = protowire.ConsumeTag(b)
//	}
package pbwire

import "google.golang.org/protobuf/encoding/protowire"

// Tag decodes a one-byte tag of fields 1-15 as protowire.ConsumeTag does.
func Tag(b []byte) (protowire.Number, protowire.Type, int, bool) {
	if len(b) > 0 && b[0] >= 1<<3 && b[0] < 0x80 {
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1, true
	}
	return 0, 0, 0, false
}

// Varint decodes a one-byte varint as protowire.ConsumeVarint does.
func Varint(b []byte) (uint64, int, bool) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1, true
	}
	return 0, 0, false
}

// Bytes decodes a length-delimited value with a one-byte length as
// protowire.ConsumeBytes does (the value's capacity runs to b's end).
func Bytes(b []byte) ([]byte, int, bool) {
	if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
		n := int(b[0])
		return b[1:][:n], 1 + n, true
	}
	return nil, 0, false
}
