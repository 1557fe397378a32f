package chunkstore

import (
	"fmt"
	"sync"
)

// Spill is where a tiered store keeps chunk data that is not in memory. The
// store names each chunk's data by an id it never reuses. A Spill must be
// safe for concurrent use. It need not be durable: the store never reads
// back data written by another store.
type Spill interface {
	// Put stores b under id. It does not keep b after it returns.
	Put(id uint64, b []byte) error
	// Get returns a copy of the data stored under id; the caller owns it.
	Get(id uint64) ([]byte, error)
	// Delete removes the data stored under the ids; ids with no data are
	// ignored. It does not keep ids.
	Delete(ids []uint64) error
}

// MemSpill is a Spill in memory, for tests: it lets a test fail reads and
// writes, and count what is stored.
type MemSpill struct {
	mu   sync.Mutex
	m    map[uint64][]byte // guarded by mu
	fail error             // if set, every call fails with it; guarded by mu
}

var _ Spill = (*MemSpill)(nil)

// NewMemSpill returns an empty MemSpill.
func NewMemSpill() *MemSpill { return &MemSpill{m: make(map[uint64][]byte)} }

// SetFail makes every later call fail with err (nil to stop failing).
func (m *MemSpill) SetFail(err error) {
	m.mu.Lock()
	m.fail = err
	m.mu.Unlock()
}

// Put implements Spill.
func (m *MemSpill) Put(id uint64, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.m[id] = append([]byte(nil), b...)
	return nil
}

// Get implements Spill.
func (m *MemSpill) Get(id uint64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	b, ok := m.m[id]
	if !ok {
		return nil, fmt.Errorf("memspill: no data under id %d", id)
	}
	return append([]byte(nil), b...), nil
}

// Delete implements Spill.
func (m *MemSpill) Delete(ids []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	for _, id := range ids {
		delete(m.m, id)
	}
	return nil
}

// Len is the number of ids stored.
func (m *MemSpill) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// Has reports whether id is stored.
func (m *MemSpill) Has(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.m[id]
	return ok
}
