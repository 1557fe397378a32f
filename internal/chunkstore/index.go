package chunkstore

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/bits"
)

// index maps chunk keys to chunks: an open-addressing hash table with
// linear probing and backward-shift deletion (the table package's keyIndex
// holds slots the same way). Deletes leave no tombstones, so probes stay
// short under the constant insert and release churn of a full table; Go's
// map under that churn cost 10% of the server's CPU on 400 B inserts, most
// of it probing. Keys are mixed with a per-index seed, so that keys chosen
// to collide cannot be found without knowing it. Not safe for concurrent
// use.
type index struct {
	entries []indexEntry // len is a power of two, or 0
	n       int
	shift   uint // 64 - log2(len(entries))
	seed    uint64
}

type indexEntry struct {
	key uint64
	c   *Chunk // nil marks an empty entry
}

const indexMinSize = 16

func newIndex() index {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return index{seed: binary.LittleEndian.Uint64(b[:])}
}

func (ix *index) home(key uint64) uint64 {
	// splitmix64's finaliser, seeded.
	h := key ^ ix.seed
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
	h = (h ^ (h >> 27)) * 0x94d049bb133111eb
	h ^= h >> 31
	return h >> ix.shift
}

// get returns the chunk with key, or nil.
func (ix *index) get(key uint64) *Chunk {
	if ix.n == 0 {
		return nil
	}
	mask := uint64(len(ix.entries) - 1)
	for i := ix.home(key); ; i = (i + 1) & mask {
		e := &ix.entries[i]
		if e.c == nil || e.key == key {
			return e.c
		}
	}
}

// set maps key to c, replacing the chunk key maps to if any.
func (ix *index) set(key uint64, c *Chunk) {
	if (ix.n+1)*4 > len(ix.entries)*3 { // keep the load factor <= 3/4
		ix.grow()
	}
	mask := uint64(len(ix.entries) - 1)
	i := ix.home(key)
	for ix.entries[i].c != nil && ix.entries[i].key != key {
		i = (i + 1) & mask
	}
	if ix.entries[i].c == nil {
		ix.n++
	}
	ix.entries[i] = indexEntry{key: key, c: c}
}

// deleteChunk removes key if it maps to c.
func (ix *index) deleteChunk(key uint64, c *Chunk) {
	if ix.n == 0 {
		return
	}
	mask := uint64(len(ix.entries) - 1)
	i := ix.home(key)
	for {
		e := &ix.entries[i]
		if e.c == nil {
			return
		}
		if e.key == key {
			if e.c != c {
				return
			}
			break
		}
		i = (i + 1) & mask
	}
	// Backward shift: move later entries of the run into the hole when
	// their home position allows it.
	hole := i
	for j := (i + 1) & mask; ix.entries[j].c != nil; j = (j + 1) & mask {
		h := ix.home(ix.entries[j].key)
		// The entry at j may move to hole if its home is not in (hole, j]
		// (cyclically).
		if (j > hole && (h <= hole || h > j)) || (j < hole && h <= hole && h > j) {
			ix.entries[hole] = ix.entries[j]
			hole = j
		}
	}
	ix.entries[hole] = indexEntry{}
	ix.n--
}

func (ix *index) grow() {
	size := max(indexMinSize, 2*len(ix.entries))
	old := ix.entries
	ix.entries = make([]indexEntry, size)
	ix.shift = uint(64 - bits.TrailingZeros(uint(size)))
	mask := uint64(size - 1)
	for _, e := range old {
		if e.c == nil {
			continue
		}
		i := ix.home(e.key)
		for ix.entries[i].c != nil {
			i = (i + 1) & mask
		}
		ix.entries[i] = e
	}
}
