package main

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestParseRings(t *testing.T) {
	rs, err := parseRings("400:10, 40000:3", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[400].slots != 10 || rs[40000].slots != 3 || len(rs[40000].buf) != 120000 {
		t.Fatalf("parseRings: got %+v", rs)
	}
	if rs, err := parseRings("", false); err != nil || len(rs) != 0 {
		t.Fatalf(`parseRings("", false): %v, %v`, rs, err)
	}
	for _, bad := range []string{"400", "400:0", "0:5", "x:5", "400:-1", "400:2,400:3", "400:2,"} {
		if _, err := parseRings(bad, false); err == nil {
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
		p := r.pickParts(nil)
		if len(p) != 1 || len(p[0]) != 4 || cap(p[0]) != 4 {
			t.Fatalf("pickParts: %d parts, the first of len %d cap %d", len(p), len(p[0]), cap(p[0]))
		}
	}
}

// An inserted payload split across gRPC's buffers lands whole in the ring's
// next slot, and a sample response of slots decodes as one BytesValue.
func TestCodecRing(t *testing.T) {
	rs, err := parseRings("1000:2", false)
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

// countingPool is a gRPC buffer pool that counts the buffers given back.
type countingPool struct{ put int }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.put++ }

// With --keep an inserted payload stays in gRPC's buffers: they outlive
// gRPC's own Free, samples are made of them, and they go back to the pool
// only when the slot is overwritten.
func TestCodecRingKeep(t *testing.T) {
	rs, err := parseRings("5000:1", true)
	if err != nil {
		t.Fatal(err)
	}
	c := newBytesCodec(rs)
	pool := &countingPool{}
	receive := func(seed uint64) []byte {
		t.Helper()
		payload := randomBytes(5000, seed)
		enc, err := proto.Marshal(wrapperspb.Bytes(payload))
		if err != nil {
			t.Fatal(err)
		}
		var data mem.BufferSlice
		// Parts of 1 KiB or more: gRPC pools no smaller buffers.
		for _, part := range [][]byte{enc[:1100], enc[1100:3000], enc[3000:]} {
			b := pool.Get(len(part))
			copy(*b, part)
			data = append(data, mem.NewBuffer(b, pool))
		}
		if err := c.Unmarshal(data, new(wrapperspb.BytesValue)); err != nil {
			t.Fatal(err)
		}
		data.Free() // as gRPC does after Unmarshal
		return payload
	}
	first := receive(5)
	if pool.put != 0 {
		t.Fatalf("%d buffers back in the pool while the payload is held", pool.put)
	}
	if got := bytes.Join(rs[5000].pickParts(nil), nil); !bytes.Equal(got, first) {
		t.Fatal("pickParts: not the held payload")
	}
	second := receive(6)
	if pool.put != 3 {
		t.Fatalf("%d buffers back in the pool after the slot was overwritten, want 3", pool.put)
	}
	if got := bytes.Join(rs[5000].pickParts(nil), nil); !bytes.Equal(got, second) {
		t.Fatal("pickParts: not the second payload")
	}
}
