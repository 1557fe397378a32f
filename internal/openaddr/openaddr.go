// Package openaddr is a hash map from uint64 keys to small values: open
// addressing with linear probing and backward-shift deletion. Deletes leave
// no tombstones, so probe sequences stay short under the constant insert
// and delete churn of a full replay table, and a lookup usually costs one
// cache miss (an entry holds key and value together). Go's built-in map
// under that churn cost several times more per operation at 1e7 entries
// (the table's item index) and 10% of the server's CPU on 400 B inserts
// (the chunk store's index).
//
// Keys are mixed with a per-map seed, so that keys chosen to collide cannot
// be found without knowing it.
package openaddr

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/reverie-rl/reverie/internal/prefetch"
)

// Map maps uint64 keys to values of V. The zero V marks an empty entry, so
// it cannot be stored. The zero Map is empty, with seed 0; use New for a
// random seed. Not safe for concurrent use.
type Map[V comparable] struct {
	entries []entry[V] // len is a power of two, or 0
	n       int
	shift   uint // 64 - log2(len(entries))
	seed    uint64
}

type entry[V comparable] struct {
	key uint64
	v   V // the zero V marks an empty entry
}

const minSize = 16

// New returns an empty map with a random seed.
func New[V comparable]() Map[V] { return WithSeed[V](RandomSeed()) }

// WithSeed returns an empty map with the given seed.
func WithSeed[V comparable](seed uint64) Map[V] { return Map[V]{seed: seed} }

// RandomSeed returns a seed from crypto/rand.
func RandomSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// Len is the number of keys.
func (m *Map[V]) Len() int { return m.n }

func (m *Map[V]) home(key uint64) uint64 { return mix(key, m.seed) >> m.shift }

// mix is splitmix64's finaliser, seeded.
func mix(key, seed uint64) uint64 {
	h := key ^ seed
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
	h = (h ^ (h >> 27)) * 0x94d049bb133111eb
	return h ^ (h >> 31)
}

// Get returns the value of key, or the zero V and false.
func (m *Map[V]) Get(key uint64) (V, bool) {
	var zero V
	if m.n == 0 {
		return zero, false
	}
	mask := uint64(len(m.entries) - 1)
	for i := m.home(key); ; i = (i + 1) & mask {
		e := &m.entries[i]
		if e.v == zero {
			return zero, false
		}
		if e.key == key {
			return e.v, true
		}
	}
}

// Prefetch asks the CPU to start fetching the entry where a lookup of key
// starts (see package prefetch), so that a later lookup finds it cached.
// Prefetching the keys of a batch before looking them up one by one
// overlaps their cache misses instead of paying one after another.
func (m *Map[V]) Prefetch(key uint64) {
	if len(m.entries) == 0 {
		return
	}
	prefetch.Line(unsafe.Pointer(&m.entries[m.home(key)]))
}

// PrefetchDelete is Prefetch for a key about to be deleted: it also asks
// for the cache line after the entry's, into which deleting shifts the
// rest of the entry's run.
func (m *Map[V]) PrefetchDelete(key uint64) {
	if len(m.entries) == 0 {
		return
	}
	i := m.home(key)
	prefetch.Line(unsafe.Pointer(&m.entries[i]))
	prefetch.Line(unsafe.Pointer(&m.entries[(i+64/uint64(unsafe.Sizeof(m.entries[0])))&uint64(len(m.entries)-1)]))
}

// Hint is a copy of where a map's entries lie, for prefetching lookups
// without the map: see Map.Hint.
type Hint struct {
	base  uintptr
	shift uint
	seed  uint64
	size  uintptr // of an entry
}

// Hint returns where m's entries lie now. It stays usable for prefetching
// from any goroutine after m changes (a prefetch of a stale address is
// harmless), but its owner should take a new one after Set, which may move
// the entries.
func (m *Map[V]) Hint() Hint {
	if len(m.entries) == 0 {
		return Hint{}
	}
	return Hint{
		base:  uintptr(unsafe.Pointer(&m.entries[0])),
		shift: m.shift,
		seed:  m.seed,
		size:  unsafe.Sizeof(m.entries[0]),
	}
}

// Prefetch asks the CPU to start fetching the entry where a lookup of key
// started when the hint was taken.
func (h *Hint) Prefetch(key uint64) {
	if h.base != 0 {
		prefetch.Addr(h.addr(key))
	}
}

// addr is the address of the entry where a lookup of key started.
func (h *Hint) addr(key uint64) uintptr {
	return h.base + uintptr(mix(key, h.seed)>>h.shift)*h.size
}

// Set maps key to v, replacing its value if key is present. v must not be
// the zero V.
func (m *Map[V]) Set(key uint64, v V) {
	var zero V
	if v == zero {
		panic("openaddr: Set of the zero value")
	}
	if (m.n+1)*4 > len(m.entries)*3 { // keep the load factor <= 3/4
		m.grow()
	}
	mask := uint64(len(m.entries) - 1)
	i := m.home(key)
	for m.entries[i].v != zero && m.entries[i].key != key {
		i = (i + 1) & mask
	}
	if m.entries[i].v == zero {
		m.n++
	}
	m.entries[i] = entry[V]{key: key, v: v}
}

// Delete removes key if present.
func (m *Map[V]) Delete(key uint64) {
	if i, ok := m.find(key); ok {
		m.remove(i)
	}
}

// DeleteFunc removes key if match reports true for its value, and
// returns the value removed and true; else the zero V and false. It finds
// the key once.
func (m *Map[V]) DeleteFunc(key uint64, match func(V) bool) (V, bool) {
	i, ok := m.find(key)
	if !ok || !match(m.entries[i].v) {
		var zero V
		return zero, false
	}
	v := m.entries[i].v
	m.remove(i)
	return v, true
}

// find returns the entry index of key.
func (m *Map[V]) find(key uint64) (uint64, bool) {
	var zero V
	if m.n == 0 {
		return 0, false
	}
	mask := uint64(len(m.entries) - 1)
	for i := m.home(key); ; i = (i + 1) & mask {
		e := &m.entries[i]
		if e.v == zero {
			return 0, false
		}
		if e.key == key {
			return i, true
		}
	}
}

// remove empties entry i by shifting later entries of its run back into
// the hole where their home position allows it.
func (m *Map[V]) remove(i uint64) {
	var zero V
	mask := uint64(len(m.entries) - 1)
	hole := i
	for j := (i + 1) & mask; m.entries[j].v != zero; j = (j + 1) & mask {
		h := m.home(m.entries[j].key)
		// The entry at j may move to hole if its home is not in (hole, j]
		// (cyclically).
		if (j > hole && (h <= hole || h > j)) || (j < hole && h <= hole && h > j) {
			m.entries[hole] = m.entries[j]
			hole = j
		}
	}
	m.entries[hole] = entry[V]{}
	m.n--
}

func (m *Map[V]) grow() {
	var zero V
	size := max(minSize, 2*len(m.entries))
	old := m.entries
	m.entries = make([]entry[V], size)
	m.shift = uint(64 - bits.TrailingZeros(uint(size)))
	mask := uint64(size - 1)
	for _, e := range old {
		if e.v == zero {
			continue
		}
		i := m.home(e.key)
		for m.entries[i].v != zero {
			i = (i + 1) & mask
		}
		m.entries[i] = e
	}
}

// All calls f for every key and value, in no particular order. f must not
// change the map.
func (m *Map[V]) All(f func(key uint64, v V)) {
	var zero V
	for _, e := range m.entries {
		if e.v != zero {
			f(e.key, e.v)
		}
	}
}

// Reset empties the map and releases its memory; the seed stays.
func (m *Map[V]) Reset() { *m = Map[V]{seed: m.seed} }
