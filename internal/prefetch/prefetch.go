// Package prefetch asks the CPU to start fetching a cache line that the
// caller will read soon. Replay tables of a million items miss the cache
// on almost every index lookup; issuing the fetches of a whole request's
// lookups first, then doing the lookups, overlaps those misses instead of
// paying them one after another.
//
// A prefetch is a hint: it never faults, even on an address that is not
// mapped, it changes nothing the program can observe, and it is not a
// read in the sense of the Go memory model (so it cannot race). On
// architectures without an implementation here it does nothing.
package prefetch

import "unsafe"

// Line hints that the cache line holding p will be read soon. p may be any
// address, valid or not.
func Line(p unsafe.Pointer) { line(uintptr(p)) }

// Addr is Line for an address computed as an integer, such as an element
// of an array that may have been freed since.
func Addr(p uintptr) { line(p) }
