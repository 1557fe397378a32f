package h2grpc

import "testing"

func TestIDSet(t *testing.T) {
	var s idSet
	s.advance(9)
	s.add(3)
	s.add(4)  // even: never a client's stream
	s.add(11) // not yet opened
	if !s.has(3) || s.has(1) || s.has(5) || s.has(4) || s.has(11) {
		t.Fatalf("after adding 3: has(1,3,4,5,11) = %v %v %v %v %v", s.has(1), s.has(3), s.has(4), s.has(5), s.has(11))
	}
	// Ids fall out of the window as newer ones open, and the slots they
	// leave start clear.
	s.advance(3 + 2*(idWindow-1))
	if !s.has(3) {
		t.Fatal("3 forgotten while still in the window")
	}
	s.advance(3 + 2*idWindow)
	if s.has(3) || s.has(3+2*idWindow) {
		t.Fatal("3 still known, or its slot not cleared for the id that replaced it")
	}
	s.add(3 + 2*idWindow)
	s.advance(1 << 30) // a jump past the whole window clears it
	if s.has(3 + 2*idWindow) {
		t.Fatal("kept across a jump of the whole window")
	}
	s.add(1<<30 - 1)
	if !s.has(1<<30 - 1) {
		t.Fatal("the newest id not recorded")
	}
}
