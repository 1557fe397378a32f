package pbwire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// check compares the fast paths, where they succeed, with protowire on b:
// the same results, and for bytes the same slice (start, length and
// capacity).
func check(t *testing.T, b []byte) (hits int) {
	t.Helper()
	if n1, t1, l1, ok := Tag(b); ok {
		hits++
		n2, t2, l2 := protowire.ConsumeTag(b)
		if n1 != n2 || t1 != t2 || l1 != l2 {
			t.Fatalf("Tag(%x) = %d, %d, %d; protowire: %d, %d, %d", b, n1, t1, l1, n2, t2, l2)
		}
	}
	if v1, m1, ok := Varint(b); ok {
		hits++
		v2, m2 := protowire.ConsumeVarint(b)
		if v1 != v2 || m1 != m2 {
			t.Fatalf("Varint(%x) = %d, %d; protowire: %d, %d", b, v1, m1, v2, m2)
		}
	}
	if s1, k1, ok := Bytes(b); ok {
		hits++
		s2, k2 := protowire.ConsumeBytes(b)
		if k1 != k2 || !bytes.Equal(s1, s2) || cap(s1) != cap(s2) || (cap(s1) > 0 && &s1[:1][0] != &s2[:1][0]) {
			t.Fatalf("Bytes(%x) = %x (cap %d), %d; protowire: %x (cap %d), %d", b, s1, cap(s1), k1, s2, cap(s2), k2)
		}
	}
	return hits
}

// TestMatchesProtowire tries every input of up to two bytes, those bytes
// followed by more, and random inputs, and checks that the fast paths do
// take the one-byte cases.
func TestMatchesProtowire(t *testing.T) {
	check(t, nil)
	check(t, []byte{})
	for a := 0; a < 256; a++ {
		check(t, []byte{byte(a)})
		for b := 0; b < 256; b++ {
			check(t, []byte{byte(a), byte(b)})
			check(t, []byte{byte(a), byte(b), 7, 8, 9})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		b := make([]byte, r.IntN(140))
		for j := range b {
			b[j] = byte(r.UintN(256))
		}
		if len(b) > 0 && r.IntN(2) == 0 {
			b[0] = byte(r.IntN(len(b) + 2)) // a length that fits, or just not
		}
		check(t, b)
	}
	if _, _, _, ok := Tag([]byte{0x0a, 0x01}); !ok {
		t.Error("Tag did not decode 0a")
	}
	if _, _, ok := Varint([]byte{0x05}); !ok {
		t.Error("Varint did not decode 05")
	}
	if _, _, ok := Bytes([]byte{0x01, 0x09}); !ok {
		t.Error("Bytes did not decode 01 09")
	}
}
