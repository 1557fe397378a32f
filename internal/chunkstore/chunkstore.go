package chunkstore

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/protobuf/proto"
)

// Errors of the tiered modes; Chunk.Data wraps them with the chunk key.
var (
	// ErrRead: the chunk's data could not be read back from the spill.
	ErrRead = errors.New("chunkstore: cannot read chunk data")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("chunkstore: closed")
	// ErrReleased: the chunk's last reference was dropped before the read;
	// its data is gone. A caller that sees it failed to Pin the chunk.
	ErrReleased = errors.New("chunkstore: chunk released")
)

const numShards = 64

// Store is a set of live chunks keyed by chunk key.
type Store struct {
	shards [numShards]shard
	count  atomic.Int64
	bytes  atomic.Int64
	tier   *tier // nil in memory mode
}

type shard struct {
	mu sync.Mutex
	m  map[uint64]*Chunk // guarded by mu
}

// New returns an empty store that keeps every chunk in memory.
func New() *Store {
	s := &Store{}
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*Chunk)
	}
	return s
}

func (s *Store) shard(key uint64) *shard {
	// Keys are random, but mix them anyway so that sequential test keys
	// spread out.
	return &s.shards[(key*0x9E3779B97F4A7C15)>>58]
}

// Insert adds data to the store and returns its chunk with one reference
// owned by the caller. If a live chunk with the same key is already held,
// that chunk is returned instead (with a new reference) and data is dropped:
// the first copy wins, as on a Reverb insert stream.
//
// A tiered store keeps its own encoding of data, never data itself, so the
// caller's message (and any buffer it aliases) can be collected.
func (s *Store) Insert(data *reverbpb.ChunkData) *Chunk {
	if s.tier != nil {
		return s.insertTiered(data)
	}
	key := data.GetChunkKey()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c, ok := sh.m[key]; ok && c.tryRef() {
		return c
	}
	c := &Chunk{data: data, key: key, size: proto.Size(data), store: s}
	c.refs.Store(1)
	sh.m[key] = c
	s.count.Add(1)
	s.bytes.Add(int64(c.size))
	return c
}

func (s *Store) insertTiered(data *reverbpb.ChunkData) *Chunk {
	key := data.GetChunkKey()
	if c := s.Get(key); c != nil {
		return c // skip the encoding of a copy that will be dropped
	}
	// Encode before publishing: a chunk others can Get has its data.
	buf, err := proto.MarshalOptions{Deterministic: true}.Marshal(data)
	if err != nil {
		// Messages that came off the wire or out of a checkpoint always
		// encode; anything else is a bug in the caller.
		panic("chunkstore: cannot encode chunk: " + err.Error())
	}
	c := &Chunk{
		key:     key,
		episode: data.GetSequenceRange().GetEpisodeId(),
		rows:    rowsOf(data),
		size:    len(buf),
		store:   s,
		id:      s.tier.nextID.Add(1),
		buf:     buf,
	}
	c.refs.Store(1)
	sh := s.shard(key)
	sh.mu.Lock()
	if old, ok := sh.m[key]; ok && old.tryRef() {
		sh.mu.Unlock()
		return old // lost a race with another insert of the key
	}
	sh.m[key] = c
	sh.mu.Unlock()
	s.count.Add(1)
	s.bytes.Add(int64(c.size))
	s.tier.add(c)
	return c
}

// rowsOf lists the leading dimension of each tensor, or -1 where the shape
// does not say.
func rowsOf(data *reverbpb.ChunkData) []int64 {
	ts := data.GetData().GetTensors()
	rows := make([]int64, len(ts))
	for i, t := range ts {
		rows[i] = -1
		if dims := t.GetTensorShape().GetDim(); len(dims) > 0 && dims[0].GetSize() >= 0 {
			rows[i] = dims[0].GetSize()
		}
	}
	return rows
}

// Get returns the live chunk with key, with one new reference owned by the
// caller, or nil.
func (s *Store) Get(key uint64) *Chunk {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c, ok := sh.m[key]; ok && c.tryRef() {
		return c
	}
	return nil
}

// Len is the number of live chunks.
func (s *Store) Len() int { return int(s.count.Load()) }

// Bytes is the encoded size of the live chunks.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// Close stops a tiered store: later reads of spilled data fail with
// ErrClosed, and the goroutine that deletes released chunks from the spill
// finishes its work and exits. It does not close the spill. Close is
// idempotent; in memory mode it does nothing.
func (s *Store) Close() error {
	if s.tier == nil {
		return nil
	}
	return s.tier.close()
}

func (s *Store) release(c *Chunk) {
	s.count.Add(-1)
	s.bytes.Add(-int64(c.size))
	sh := s.shard(c.key)
	sh.mu.Lock()
	if sh.m[c.key] == c {
		delete(sh.m, c.key)
	}
	sh.mu.Unlock()
	if s.tier != nil {
		s.tier.release(c)
	}
}

// Chunk is one stored chunk.
type Chunk struct {
	key   uint64
	size  int
	store *Store
	refs  atomic.Int32

	// data is the chunk as received; memory mode only.
	data *reverbpb.ChunkData

	// Tiered mode only. The metadata never changes.
	episode uint64
	rows    []int64 // leading dimension of each tensor, -1 if unknown
	id      uint64  // the spill key: unique in the store, never reused

	// Guarded by store.tier.mu.
	buf        []byte // encoded data when in memory, else nil
	prev, next *Chunk // links in the LRU list; nil when not in it
	onDisk     bool   // the spill holds the data
	spilling   bool   // being written to the spill, buf still set
	released   bool   // the last reference was dropped
}

// Key is the client-chosen chunk key.
func (c *Chunk) Key() uint64 { return c.key }

// Data returns the chunk as received. Callers must not modify it. In memory
// mode it never fails. In the tiered modes it decodes a fresh message on
// each call, reading the spill if the data is not in memory; errors wrap
// ErrRead, ErrClosed or ErrReleased and name the chunk key.
func (c *Chunk) Data() (*reverbpb.ChunkData, error) {
	if c.store.tier == nil {
		return c.data, nil
	}
	return c.store.tier.data(c)
}

// Size is the encoded size of the chunk in bytes.
func (c *Chunk) Size() int { return c.size }

// EpisodeID is the episode the chunk's rows belong to.
func (c *Chunk) EpisodeID() uint64 {
	if c.store.tier == nil {
		return c.data.GetSequenceRange().GetEpisodeId()
	}
	return c.episode
}

// NumTensors is the number of column tensors in the chunk.
func (c *Chunk) NumTensors() int {
	if c.store.tier == nil {
		return len(c.data.GetData().GetTensors())
	}
	return len(c.rows)
}

// Rows returns the number of rows (the leading dimension) of tensor i, and
// false when there is no such tensor or its shape does not say.
func (c *Chunk) Rows(i int) (int64, bool) {
	if c.store.tier != nil {
		if i < 0 || i >= len(c.rows) || c.rows[i] < 0 {
			return 0, false
		}
		return c.rows[i], true
	}
	ts := c.data.GetData().GetTensors()
	if i < 0 || i >= len(ts) {
		return 0, false
	}
	dims := ts[i].GetTensorShape().GetDim()
	if len(dims) == 0 || dims[0].GetSize() < 0 {
		return 0, false
	}
	return dims[0].GetSize(), true
}

// Refs is the current number of references; for tests and metrics.
func (c *Chunk) Refs() int { return int(c.refs.Load()) }

// Ref adds a reference. The caller must already hold one.
func (c *Chunk) Ref() {
	if c.refs.Add(1) <= 1 {
		panic("chunkstore: Ref on a released chunk")
	}
}

// Unref drops a reference; the last one removes the chunk from the store.
func (c *Chunk) Unref() {
	switch n := c.refs.Add(-1); {
	case n == 0:
		c.store.release(c)
	case n < 0:
		panic("chunkstore: Unref of a released chunk")
	}
}

// Pin keeps the chunk's data readable until Unpin, even if every other
// reference is dropped meanwhile. The caller must hold a reference (or a
// lock under which one is held) when it pins. In memory mode the data stays
// reachable through the pointer, so Pin and Unpin do nothing; in the tiered
// modes they add and drop a reference.
func (c *Chunk) Pin() {
	if c.store.tier != nil {
		c.Ref()
	}
}

// Unpin undoes Pin.
func (c *Chunk) Unpin() {
	if c.store.tier != nil {
		c.Unref()
	}
}

// tryRef adds a reference unless the chunk is already released.
func (c *Chunk) tryRef() bool {
	for {
		n := c.refs.Load()
		if n <= 0 {
			return false
		}
		if c.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
