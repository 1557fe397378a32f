package main

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestParseRings(t *testing.T) {
	rs, err := parseRings("400:10, 40000:3")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[400].slots != 10 || rs[40000].slots != 3 || len(rs[40000].buf) != 120000 {
		t.Fatalf("parseRings: got %+v", rs)
	}
	if rs, err := parseRings(""); err != nil || len(rs) != 0 {
		t.Fatalf(`parseRings(""): %v, %v`, rs, err)
	}
	for _, bad := range []string{"400", "400:0", "0:5", "x:5", "400:-1", "400:2,400:3", "400:2,"} {
		if _, err := parseRings(bad); err == nil {
			t.Errorf("parseRings(%q): no error", bad)
		}
	}
}

func TestRingSlots(t *testing.T) {
	r := newRing(4, 3)
	var got [][]byte
	for range 4 {
		got = append(got, r.take())
	}
	if &got[0][0] != &got[3][0] || &got[0][0] == &got[1][0] || &got[1][0] == &got[2][0] {
		t.Fatal("take: want slots 0, 1, 2, 0")
	}
	for _, s := range got {
		if len(s) != 4 || cap(s) != 4 {
			t.Fatalf("slot of len %d cap %d, want 4 and 4", len(s), cap(s))
		}
	}
	for range 100 {
		s := r.pick()
		if len(s) != 4 || cap(s) != 4 {
			t.Fatalf("pick: slot of len %d cap %d", len(s), cap(s))
		}
	}
}

// An inserted payload split across gRPC's buffers lands whole in the ring's
// next slot, and a sample response of slots decodes as one BytesValue.
func TestCodecRing(t *testing.T) {
	rs, err := parseRings("1000:2")
	if err != nil {
		t.Fatal(err)
	}
	c := newBytesCodec(rs)
	payload := randomBytes(1000, 3)
	enc, err := proto.Marshal(wrapperspb.Bytes(payload))
	if err != nil {
		t.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(enc[:10]), mem.SliceBuffer(enc[10:600]), mem.SliceBuffer(enc[600:])}
	m := new(wrapperspb.BytesValue)
	if err := c.Unmarshal(data, m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Value, payload) || &m.Value[0] != &rs[1000].buf[0] {
		t.Fatal("Unmarshal: payload not copied whole into the ring's first slot")
	}
	// Other sizes are not kept in the ring.
	small := randomBytes(10, 4)
	enc, _ = proto.Marshal(wrapperspb.Bytes(small))
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(enc[:3]), mem.SliceBuffer(enc[3:])}, m); err != nil || !bytes.Equal(m.Value, small) {
		t.Fatalf("Unmarshal of a size without a ring: %v", err)
	}
	if rs[1000].next.Load() != 1 {
		t.Fatalf("ring advanced %d times, want 1", rs[1000].next.Load())
	}

	p := &pieces{parts: [][]byte{[]byte("ab"), []byte("cde"), []byte("f")}}
	out, err := c.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	got := new(wrapperspb.BytesValue)
	if err := proto.Unmarshal(out.Materialize(), got); err != nil || string(got.Value) != "abcdef" {
		t.Fatalf("pieces decode as %q, %v; want \"abcdef\"", got.Value, err)
	}
}
