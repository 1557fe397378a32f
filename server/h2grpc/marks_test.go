package h2grpc

import "testing"

func TestStreamMarks(t *testing.T) {
	var s streamMarks
	s.advance(9)
	s.add(3, markEnded)
	s.add(4, markEnded)  // even: never a client's stream
	s.add(11, markEnded) // not yet opened
	if !s.has(3, markEnded) || s.has(1, markEnded) || s.has(5, markEnded) || s.has(4, markEnded) || s.has(11, markEnded) {
		t.Fatalf("after marking 3: has(1,3,4,5,11) = %v %v %v %v %v", s.has(1, markEnded), s.has(3, markEnded), s.has(4, markEnded), s.has(5, markEnded), s.has(11, markEnded))
	}
	if s.has(3, markReset) {
		t.Fatal("3 marked reset as well as ended")
	}
	s.add(5, markReset)
	if !s.has(5, markReset) || s.has(5, markEnded) {
		t.Fatal("5: reset mark missing, or an ended mark it was not given")
	}
	// Ids fall out of the window as newer ones open, and the slots they
	// leave start clear, of every mark.
	s.advance(3 + 2*(idWindow-1))
	if !s.has(3, markEnded) || !s.has(5, markReset) {
		t.Fatal("3 or 5 forgotten while still in the window")
	}
	s.advance(5 + 2*idWindow)
	if s.has(3, markEnded) || s.has(3+2*idWindow, markEnded) || s.has(5+2*idWindow, markReset) {
		t.Fatal("3 still known, or a slot not cleared for the id that replaced it")
	}
	s.add(3+2*idWindow, markEnded)
	s.advance(1 << 30) // a jump past the whole window clears it
	if s.has(3+2*idWindow, markEnded) {
		t.Fatal("kept across a jump of the whole window")
	}
	s.add(1<<30-1, markReset)
	if !s.has(1<<30-1, markReset) {
		t.Fatal("the newest id not marked")
	}
}
