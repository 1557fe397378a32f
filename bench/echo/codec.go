package main

import (
	"bytes"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// bytesCodec is gRPC's proto codec with payloads moved the way reverie's
// client and server move chunk bytes, so that the echo stays a ceiling for
// them: a BytesValue is sent with its payload handed to gRPC uncopied
// (only the tag and length are written), and received with the payload
// copied once out of gRPC's buffers into memory the receiver owns (not
// zeroed first). The wire format is the proto codec's.
//
// With rings (the server's, from --rings), a payload of a size that
// has a ring is copied into the ring's next slot instead, or with --keep
// left in gRPC's buffers and those kept in the slot.
type bytesCodec struct {
	proto encoding.CodecV2
	rings rings
}

func newBytesCodec(rs rings) *bytesCodec {
	return &bytesCodec{proto: encoding.GetCodecV2(protocodec.Name), rings: rs}
}

func (c *bytesCodec) Name() string { return protocodec.Name }

func (c *bytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	if p, ok := v.(*pieces); ok {
		return p.marshal(), nil
	}
	m, ok := v.(*wrapperspb.BytesValue)
	if !ok || len(m.GetValue()) == 0 {
		return c.proto.Marshal(v)
	}
	head := protowire.AppendTag(make([]byte, 0, 11), 1, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(m.Value)))
	return mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(m.Value)}, nil
}

func (c *bytesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*wrapperspb.BytesValue)
	if !ok || data.Len() < 2 {
		return c.proto.Unmarshal(data, v)
	}
	var views [][]byte
	for _, b := range data {
		views = append(views, b.ReadOnlyData())
	}
	// The tag and length are in the first buffer (gRPC's buffers are
	// kilobytes); anything else goes to the proto codec.
	first := views[0]
	num, typ, n := protowire.ConsumeTag(first)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return c.proto.Unmarshal(data, v)
	}
	size, k := protowire.ConsumeVarint(first[n:])
	if k < 0 || uint64(data.Len()-n-k) != size {
		return c.proto.Unmarshal(data, v)
	}
	views[0] = first[n+k:]
	if r := c.rings[int(size)]; r != nil && r.held != nil {
		// Kept where the transport read it: gRPC frees data after
		// Unmarshal, so take a reference first.
		data.Ref()
		r.hold(&heldPayload{bufs: data, parts: views})
		m.Value = views[0]
		return nil
	}
	if r := c.rings[int(size)]; r != nil {
		slot := r.take()
		at := 0
		for _, b := range views {
			at += copy(slot[at:], b)
		}
		m.Value = slot
		return nil
	}
	m.Value = bytes.Join(views, nil) // one copy, without zeroing
	return nil
}
