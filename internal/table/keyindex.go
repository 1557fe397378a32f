package table

import (
	"github.com/reverie-rl/reverie/internal/openaddr"
	"github.com/reverie-rl/reverie/selector"
)

// keyIndex maps item keys to slots: an openaddr.Map holding slot+1, so
// that slot 0 is not the map's empty value. Not safe for concurrent use.
type keyIndex struct {
	m openaddr.Map[uint32]
}

func newKeyIndex(seed uint64) *keyIndex { return &keyIndex{m: openaddr.WithSeed[uint32](seed)} }

func (ix *keyIndex) len() int { return ix.m.Len() }

// get returns the slot of key.
func (ix *keyIndex) get(key uint64) (selector.Slot, bool) {
	s, ok := ix.m.Get(key)
	if !ok {
		return 0, false
	}
	return s - 1, true
}

// prefetch asks the CPU to fetch where key's lookup starts.
func (ix *keyIndex) prefetch(key uint64) { ix.m.Prefetch(key) }

// prefetchDelete asks the CPU to fetch what deleting key will read.
func (ix *keyIndex) prefetchDelete(key uint64) { ix.m.PrefetchDelete(key) }

// put maps key to slot.
func (ix *keyIndex) put(key uint64, slot selector.Slot) { ix.m.Set(key, slot+1) }

// delete removes key if present.
func (ix *keyIndex) delete(key uint64) { ix.m.Delete(key) }

// all calls f for every key and slot.
func (ix *keyIndex) all(f func(key uint64, slot selector.Slot)) {
	ix.m.All(func(key uint64, s uint32) { f(key, s-1) })
}

// reset empties the index and releases its memory.
func (ix *keyIndex) reset() { ix.m.Reset() }

func randSeed() uint64 { return openaddr.RandomSeed() }
