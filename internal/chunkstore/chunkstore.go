// Package chunkstore holds the chunks that table items reference.
//
// A chunk is a block of compressed, client-encoded episode steps. The store
// never looks inside the tensors: it keeps each ChunkData as it arrived and
// hands it back for samples. Chunks are reference-counted. An insert stream
// holds one reference to each chunk it keeps for its writer, every item
// holds one reference to each chunk it names, and the chunk leaves the store
// when the last reference is dropped. Chunks with the same key are shared
// across streams, items and tables.
//
// Store and Chunk are safe for concurrent use.
package chunkstore

import (
	"sync"
	"sync/atomic"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/protobuf/proto"
)

const numShards = 64

// Store is a set of live chunks keyed by chunk key.
type Store struct {
	shards [numShards]shard
	count  atomic.Int64
	bytes  atomic.Int64
}

type shard struct {
	mu sync.Mutex
	m  map[uint64]*Chunk // guarded by mu
}

// New returns an empty store.
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
func (s *Store) Insert(data *reverbpb.ChunkData) *Chunk {
	key := data.GetChunkKey()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c, ok := sh.m[key]; ok && c.tryRef() {
		return c
	}
	c := &Chunk{data: data, size: proto.Size(data), store: s}
	c.refs.Store(1)
	sh.m[key] = c
	s.count.Add(1)
	s.bytes.Add(int64(c.size))
	return c
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

func (s *Store) release(c *Chunk) {
	s.count.Add(-1)
	s.bytes.Add(-int64(c.size))
	sh := s.shard(c.Key())
	sh.mu.Lock()
	if sh.m[c.Key()] == c {
		delete(sh.m, c.Key())
	}
	sh.mu.Unlock()
}

// Chunk is one stored chunk.
type Chunk struct {
	data  *reverbpb.ChunkData
	size  int
	store *Store
	refs  atomic.Int32
}

// Key is the client-chosen chunk key.
func (c *Chunk) Key() uint64 { return c.data.GetChunkKey() }

// Data is the chunk as received. Callers must not modify it.
func (c *Chunk) Data() *reverbpb.ChunkData { return c.data }

// Size is the encoded size of the chunk in bytes.
func (c *Chunk) Size() int { return c.size }

// EpisodeID is the episode the chunk's rows belong to.
func (c *Chunk) EpisodeID() uint64 { return c.data.GetSequenceRange().GetEpisodeId() }

// NumTensors is the number of column tensors in the chunk.
func (c *Chunk) NumTensors() int { return len(c.data.GetData().GetTensors()) }

// Rows returns the number of rows (the leading dimension) of tensor i, and
// false when there is no such tensor or its shape does not say.
func (c *Chunk) Rows(i int) (int64, bool) {
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
