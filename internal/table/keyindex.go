package table

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/bits"

	"github.com/reverie-rl/reverie/selector"
)

// keyIndex maps item keys to slots. It is an open-addressing hash table
// with linear probing and backward-shift deletion: deletes leave no
// tombstones, so probe sequences stay short under the constant insert and
// delete churn of a full table, and a lookup usually costs one cache miss
// (an entry holds key and slot together). Go's built-in map, at 1e7
// entries under that churn, cost several times more per operation.
//
// Keys are mixed with a per-index seed, so that keys chosen to collide
// cannot be found without knowing it. Not safe for concurrent use.
type keyIndex struct {
	entries []keyEntry // len is a power of two, or 0
	n       int
	shift   uint // 64 - log2(len(entries))
	seed    uint64
}

type keyEntry struct {
	key  uint64
	slot uint32 // slot+1; 0 marks an empty entry
}

const keyIndexMinSize = 16

func newKeyIndex(seed uint64) *keyIndex { return &keyIndex{seed: seed} }

func (ix *keyIndex) len() int { return ix.n }

func (ix *keyIndex) home(key uint64) uint64 {
	// splitmix64's finaliser, seeded.
	h := key ^ ix.seed
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
	h = (h ^ (h >> 27)) * 0x94d049bb133111eb
	h ^= h >> 31
	return h >> ix.shift
}

// get returns the slot of key.
func (ix *keyIndex) get(key uint64) (selector.Slot, bool) {
	if ix.n == 0 {
		return 0, false
	}
	mask := uint64(len(ix.entries) - 1)
	for i := ix.home(key); ; i = (i + 1) & mask {
		e := &ix.entries[i]
		if e.slot == 0 {
			return 0, false
		}
		if e.key == key {
			return e.slot - 1, true
		}
	}
}

// put maps key to slot; key must not be present.
func (ix *keyIndex) put(key uint64, slot selector.Slot) {
	if (ix.n+1)*4 > len(ix.entries)*3 { // keep the load factor <= 3/4
		ix.grow()
	}
	mask := uint64(len(ix.entries) - 1)
	i := ix.home(key)
	for ix.entries[i].slot != 0 {
		i = (i + 1) & mask
	}
	ix.entries[i] = keyEntry{key: key, slot: slot + 1}
	ix.n++
}

// delete removes key if present.
func (ix *keyIndex) delete(key uint64) {
	if ix.n == 0 {
		return
	}
	mask := uint64(len(ix.entries) - 1)
	i := ix.home(key)
	for {
		e := &ix.entries[i]
		if e.slot == 0 {
			return
		}
		if e.key == key {
			break
		}
		i = (i + 1) & mask
	}
	// Backward shift: move later entries of the run into the hole when
	// their home position allows it.
	hole := i
	for j := (i + 1) & mask; ix.entries[j].slot != 0; j = (j + 1) & mask {
		h := ix.home(ix.entries[j].key)
		// The entry at j may move to hole if its home is not in (hole, j]
		// (cyclically).
		if (j > hole && (h <= hole || h > j)) || (j < hole && h <= hole && h > j) {
			ix.entries[hole] = ix.entries[j]
			hole = j
		}
	}
	ix.entries[hole] = keyEntry{}
	ix.n--
}

func (ix *keyIndex) grow() {
	size := max(keyIndexMinSize, 2*len(ix.entries))
	old := ix.entries
	ix.entries = make([]keyEntry, size)
	ix.shift = uint(64 - bits.TrailingZeros(uint(size)))
	mask := uint64(size - 1)
	for _, e := range old {
		if e.slot == 0 {
			continue
		}
		i := ix.home(e.key)
		for ix.entries[i].slot != 0 {
			i = (i + 1) & mask
		}
		ix.entries[i] = e
	}
}

// all calls f for every key and slot.
func (ix *keyIndex) all(f func(key uint64, slot selector.Slot)) {
	for _, e := range ix.entries {
		if e.slot != 0 {
			f(e.key, e.slot-1)
		}
	}
}

// reset empties the index and releases its memory.
func (ix *keyIndex) reset() { *ix = keyIndex{seed: ix.seed} }

func randSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
