package prefetch

import (
	"testing"
	"unsafe"
)

// TestNeverFaults prefetches addresses that cannot be read: a prefetch is a
// hint, and code passes addresses of entries that may have been freed.
func TestNeverFaults(t *testing.T) {
	Addr(0)
	Addr(4096)
	Addr(^uintptr(0) &^ 63)
	x := [64]byte{1}
	Line(unsafe.Pointer(&x))
	if x[0] != 1 {
		t.Fatal("a prefetch changed memory")
	}
}
