package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A ring is memory the size of a replay table, for payloads of one size.
// With `echo serve --rings`, the server copies each inserted payload
// into the ring's next slot (with --keep, holds it there in the buffers
// gRPC read it into), as a full table overwrites its oldest items,
// and builds each sample response from slots chosen at random, as a
// uniform sampler picks items. The echo then moves its bytes from and to
// memory that is mostly not in the CPU's caches, as a replay server
// holding a table must, where the bare echo copies into memory it has just
// freed and sends one payload it keeps cached. It is still no replay
// server: no table, index, encoding or compression.
//
// Inserts write slots while samples read them, without locks: a slot sent
// while it is overwritten goes out torn. The echo's load sends only one
// kind at a time, and the bytes' values mean nothing to it.
type ring struct {
	size  int
	slots int
	buf   []byte
	next  atomic.Uint64
	// held, with --keep: each slot's payload as gRPC received it, its
	// buffers kept (Ref) instead of copied; nil until a payload lands.
	held []atomic.Pointer[heldPayload]
}

// heldPayload is a payload left in the buffers gRPC's transport read it
// into: bufs holds a reference on them, and parts are the payload's bytes
// in them, in order.
type heldPayload struct {
	bufs  mem.BufferSlice
	parts [][]byte
}

// newRing makes a ring of slots of size bytes each and writes every page
// of it, so that no measured run pays for the kernel's first touch.
func newRing(size, slots int) *ring {
	r := &ring{size: size, slots: slots, buf: make([]byte, slots*size)}
	fill := randomBytes(min(len(r.buf), 1<<20), 7)
	for off := 0; off < len(r.buf); off += len(fill) {
		copy(r.buf[off:], fill)
	}
	return r
}

// take returns the slot the next inserted payload goes to.
func (r *ring) take() []byte {
	i := int((r.next.Add(1) - 1) % uint64(r.slots))
	return r.buf[i*r.size : (i+1)*r.size : (i+1)*r.size]
}

// hold keeps h in the next slot (with --keep) and releases the payload it
// replaces.
func (r *ring) hold(h *heldPayload) {
	i := int((r.next.Add(1) - 1) % uint64(r.slots))
	if old := r.held[i].Swap(h); old != nil {
		old.bufs.Free()
	}
}

// pickParts appends the parts of a slot chosen uniformly at random: its
// held payload, or with none yet (or without --keep) the slot's bytes.
// A held payload may be released while it is sent, as a slot may be
// overwritten (above); its buffers are then reused by gRPC, still memory
// of the process.
func (r *ring) pickParts(parts [][]byte) [][]byte {
	i := rand.IntN(r.slots)
	if r.held != nil {
		if h := r.held[i].Load(); h != nil {
			return append(parts, h.parts...)
		}
	}
	return append(parts, r.buf[i*r.size:(i+1)*r.size:(i+1)*r.size])
}

// rings are the server's rings by payload size, made before it serves.
type rings map[int]*ring

// parseRings makes the rings of spec, a comma-separated list of
// SIZE:SLOTS (payload bytes and how many payloads the ring holds); an
// empty spec makes none. With keep, the rings hold inserted payloads in
// gRPC's own buffers instead of copying them (ring.hold).
func parseRings(spec string, keep bool) (rings, error) {
	rs := rings{}
	if spec == "" {
		return rs, nil
	}
	for f := range strings.SplitSeq(spec, ",") {
		size, slots, ok := strings.Cut(strings.TrimSpace(f), ":")
		n, err1 := strconv.Atoi(size)
		k, err2 := strconv.Atoi(slots)
		if !ok || err1 != nil || err2 != nil || n <= 0 || k <= 0 || n > math.MaxInt/k {
			return nil, fmt.Errorf("--rings: %q is not SIZE:SLOTS (positive payload bytes and payloads)", f)
		}
		if rs[n] != nil {
			return nil, fmt.Errorf("--rings: payload size %d given twice", n)
		}
		rs[n] = newRing(n, k)
		if keep {
			rs[n].held = make([]atomic.Pointer[heldPayload], k)
		}
	}
	return rs, nil
}

// pieces is a BytesValue whose value is the concatenation of parts, sent
// without copying them: a sample response made of ring slots.
type pieces struct {
	parts [][]byte
}

func (p *pieces) marshal() mem.BufferSlice {
	n := 0
	for _, b := range p.parts {
		n += len(b)
	}
	head := protowire.AppendTag(make([]byte, 0, 11), 1, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(n))
	out := make(mem.BufferSlice, 0, 1+len(p.parts))
	out = append(out, mem.SliceBuffer(head))
	for _, b := range p.parts {
		out = append(out, mem.SliceBuffer(b))
	}
	return out
}
