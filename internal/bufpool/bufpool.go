// Package bufpool provides a gRPC buffer pool that does not zero buffers.
//
// gRPC's default pool clears every buffer it hands out. Its transport does
// not need that, as it overwrites every byte it then reads (gRPC's own
// transport uses an unzeroed pool internally), and on large messages the
// clearing costs as much as a copy: a 40 kB insert into reverie spent 14%
// of the server's CPU in it. reverie gives this pool to gRPC's transport
// on both ends (experimental.BufferPool, experimental.WithBufferPool) and
// uses it for its own encoding buffers, which it always fills.
//
// Pool has the methods of gRPC's mem.BufferPool without importing gRPC:
// internal packages stay free of it (internal/lint); the client and the
// server check that it fits where they hand it to gRPC.
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	minShift = 8  // smallest class: 256 B
	classes  = 15 // 256 B .. 4 MiB
)

// Pool is a buffer pool of power-of-two sized buffers from 256 B to
// 4 MiB, not cleared between uses; larger buffers are allocated and
// dropped. The zero value is ready to use.
type Pool struct {
	pools [classes]sync.Pool
	// Poison makes Put overwrite the buffers it takes back, so that tests
	// see any use of a buffer after it was freed. Set it before first use.
	Poison bool
}

// class returns the index of the smallest class holding n bytes, or -1.
func class(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - minShift
	if c >= classes {
		return -1
	}
	return c
}

// Get returns a buffer of length n. Its contents are undefined.
func (p *Pool) Get(n int) *[]byte {
	c := class(n)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.pools[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(c+minShift))
	return &b
}

// Put takes back a buffer Get returned (or a prefix of it). Buffers of
// other capacities are dropped.
func (p *Pool) Put(b *[]byte) {
	n := cap(*b)
	c := class(n)
	if c < 0 || n != 1<<(c+minShift) {
		return
	}
	if p.Poison {
		full := (*b)[:n]
		for i := range full {
			full[i] = 0xa5
		}
	}
	*b = (*b)[:0]
	p.pools[c].Put(b)
}
