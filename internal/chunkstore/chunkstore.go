package chunkstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/openaddr"
	"github.com/reverie-rl/reverie/internal/prefetch"
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
	nextID atomic.Uint64 // the last Chunk.id given out
	tier   *tier         // nil in memory mode
	free   freeList      // memory mode: released buffers for reuse (recycle.go)
	slots  slots         // the chunks the shards' indexes hold (index.go)
}

type shard struct {
	mu sync.Mutex
	m  index // guarded by mu
	// hint is where m's entries lay after its last Set, for Prefetch,
	// which takes no lock; nil while m is empty.
	hint atomic.Pointer[openaddr.Hint]
}

// set maps key to c (see index.set) and keeps hint current. sh.mu must be
// held.
func (sh *shard) set(key uint64, c *Chunk, replacing bool) {
	sh.m.set(key, c, replacing)
	if old := sh.hint.Load(); old == nil || *old != sh.m.m.Hint() {
		h := sh.m.m.Hint() // allocated only when the entries moved
		sh.hint.Store(&h)
	}
}

// Prefetch asks the CPU to start fetching the index entry of key, which an
// InsertEncoded of a chunk with that key or the release of such a chunk
// will read. Prefetching the keys of a batch before working through it
// overlaps their cache misses. It takes no lock and changes nothing.
func (s *Store) Prefetch(key uint64) {
	if h := s.shard(key).hint.Load(); h != nil {
		h.Prefetch(key)
	}
}

// New returns an empty store that keeps every chunk in memory.
func New() *Store {
	s := &Store{}
	for i := range s.shards {
		s.shards[i].m = newIndex(&s.slots)
	}
	return s
}

func (s *Store) shard(key uint64) *shard {
	// Keys are random, but mix them anyway so that sequential test keys
	// spread out.
	return &s.shards[(key*0x9E3779B97F4A7C15)>>58]
}

// Insert adds data to the store, encoded, as InsertEncoded does. It is for
// chunks that were decoded already (tests, restores); the insert stream
// hands the store the bytes it received.
func (s *Store) Insert(data *reverbpb.ChunkData) *Chunk {
	if c := s.Get(data.GetChunkKey()); c != nil {
		return c // skip the encoding of a copy that will be dropped
	}
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(data)
	if err != nil {
		// Messages that came off the wire or out of a checkpoint always
		// encode; anything else is a bug in the caller.
		panic("chunkstore: cannot encode chunk: " + err.Error())
	}
	return s.InsertEncoded(MetaOf(data), enc)
}

// InsertEncoded adds a chunk to the store, given its ChunkData encoding
// and the metadata read from it (ParseMeta), and returns the chunk with
// one reference owned by the caller. The store keeps enc: the caller must
// not modify it afterwards. If a live chunk with the same key is already
// held, that chunk is returned instead (with a new reference) and enc is
// dropped: the first copy wins, as on a Reverb insert stream.
func (s *Store) InsertEncoded(m Meta, enc []byte) *Chunk {
	return s.insert(m, enc, false)
}

// insert is InsertEncoded; if recycle, enc is reused once the chunk is
// released and unpinned (InsertOwned).
func (s *Store) insert(m Meta, enc []byte, recycle bool) *Chunk {
	c := &Chunk{
		key:     m.Key,
		episode: m.Episode,
		rows:    m.Rows,
		size:    len(enc),
		store:   s,
		buf:     enc,
		recycle: recycle,
	}
	c.self[0] = c
	c.refs.Store(1)
	if recycle {
		c.bufRefs.Store(1) // dropped by the release
	}
	c.id = s.nextID.Add(1)
	sh := s.shard(m.Key)
	sh.mu.Lock()
	old := sh.m.get(m.Key)
	if old != nil && old.tryRef() {
		sh.mu.Unlock()
		if recycle {
			s.putFree(enc) // never seen by anyone else
		}
		return old
	}
	sh.set(m.Key, c, old != nil) // a released chunk's key is taken over
	sh.mu.Unlock()
	s.count.Add(1)
	s.bytes.Add(int64(c.size))
	if s.tier != nil {
		s.tier.add(c)
	}
	return c
}

// Get returns the live chunk with key, with one new reference owned by the
// caller, or nil.
func (s *Store) Get(key uint64) *Chunk {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := sh.m.get(key); c != nil && c.tryRef() {
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
	sh.m.deleteChunk(c.key, c)
	sh.mu.Unlock()
	if s.tier != nil {
		s.tier.release(c)
	}
	if c.recycle {
		c.dropBufRef()
	}
}

// Chunk is one stored chunk. The fields a sample reads (key, store, buf)
// come first, to share the struct's first cache line.
type Chunk struct {
	key   uint64
	store *Store

	// buf is the chunk's encoding. In memory mode it never changes. In
	// the tiered modes it and the fields at the end are guarded by
	// store.tier.mu; buf is nil while the data is only in the spill. The
	// bytes of a buf are never modified while the chunk is live or
	// pinned, so a reader may keep them after unlocking. In memory mode a
	// recycled buf is reused once the chunk is released and unpinned
	// (recycle.go).
	buf []byte

	size    int
	refs    atomic.Int32
	bufRefs atomic.Int32 // recycle: 1 until released, plus the pins
	recycle bool         // buf came from AllocChunk; never changes
	// noReuse: leave buf to the collector once released (KeepForSnapshot).
	noReuse atomic.Bool

	// The metadata never changes.
	episode uint64
	rows    []int64 // leading dimension of each tensor, -1 if unknown
	id      uint64  // unique in the store, never reused; the spill key in the tiered modes

	// Guarded by store.tier.mu in the tiered modes, as buf.
	prev, next *Chunk // links in the LRU list; nil when not in it
	onDisk     bool   // the spill holds the data
	spilling   bool   // being written to the spill, buf still set
	released   bool   // the last reference was dropped

	// self holds the chunk itself, for List.
	self [1]*Chunk
}

// List returns a list of one chunk, c, without allocating: its array is
// part of the chunk. Most items name a single chunk, and a list of their
// own would be one more heap object per item for the garbage collector to
// mark as long as the item lives. The list must not be modified; append
// to it copies it, as its capacity is 1.
func (c *Chunk) List() []*Chunk { return c.self[:] }

// Touch reads the chunk's first cache line, and in memory mode the first
// byte of its encoding, and returns a value derived from them for the
// caller to keep. Touching the chunks of a batch of samples before
// copying them lets the CPU fetch their lines in parallel.
func (c *Chunk) Touch() uint64 {
	v := c.key
	if c.store.tier == nil && len(c.buf) > 0 {
		v ^= uint64(c.buf[0])
	}
	return v
}

// prefetchEncodedMax bounds the bytes of an encoding PrefetchEncoded asks
// for: a longer copy keeps the CPU's own stream prefetcher ahead of it.
const prefetchEncodedMax = 2 << 10

// PrefetchEncoded asks the CPU to start fetching the cache lines of the
// chunk's encoding (its first prefetchEncodedMax bytes), which a response
// is about to copy. Sampling a large table copies a few hundred bytes from
// a random place per sample, and without this each copy waits on its
// lines one miss after another. In the tiered modes it does nothing: the
// data may not be in memory, and finding out takes a lock.
func (c *Chunk) PrefetchEncoded() {
	if c.store.tier != nil || len(c.buf) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(c.buf)))
	end := p + uintptr(min(len(c.buf), prefetchEncodedMax))
	for a := p &^ 63; a < end; a += 64 {
		prefetch.Addr(a)
	}
}

// PrefetchIndex asks the CPU to start fetching the store's index entry of
// the chunk, which its release will read (see Store.Prefetch).
func (c *Chunk) PrefetchIndex() { c.store.Prefetch(c.key) }

// Key is the client-chosen chunk key.
func (c *Chunk) Key() uint64 { return c.key }

// ID is a number no other chunk of the store has had: a key used again
// once its chunk was released names a chunk with another ID.
func (c *Chunk) ID() uint64 { return c.id }

// Encoded returns the chunk's ChunkData encoding, as received. Callers must
// not modify it. They may keep it as long as they hold a reference or a pin
// (the bytes of a chunk inserted with InsertOwned are reused after that).
// In memory mode it never fails. In the tiered modes it reads the spill if the data is not in
// memory; errors wrap ErrRead, ErrClosed or ErrReleased and name the chunk
// key.
func (c *Chunk) Encoded() ([]byte, error) {
	if c.store.tier == nil {
		return c.buf, nil
	}
	return c.store.tier.encoded(c)
}

// Data decodes the chunk's encoding into a fresh message, for callers that
// need the fields; it fails as Encoded does.
func (c *Chunk) Data() (*reverbpb.ChunkData, error) {
	enc, err := c.Encoded()
	if err != nil {
		return nil, err
	}
	d := new(reverbpb.ChunkData)
	if err := proto.Unmarshal(enc, d); err != nil {
		return nil, fmt.Errorf("%w: chunk %d: decode: %v", ErrRead, c.key, err)
	}
	return d, nil
}

// Size is the encoded size of the chunk in bytes.
func (c *Chunk) Size() int { return c.size }

// EpisodeID is the episode the chunk's rows belong to.
func (c *Chunk) EpisodeID() uint64 { return c.episode }

// NumTensors is the number of column tensors in the chunk.
func (c *Chunk) NumTensors() int { return len(c.rows) }

// Rows returns the number of rows (the leading dimension) of tensor i, and
// false when there is no such tensor or its shape does not say.
func (c *Chunk) Rows(i int) (int64, bool) {
	if i < 0 || i >= len(c.rows) || c.rows[i] < 0 {
		return 0, false
	}
	return c.rows[i], true
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
// lock under which one is held), or a pin, when it pins. In the tiered
// modes Pin and Unpin add and drop a reference. In memory mode they count
// the readers of a recycled chunk's buffer, which is reused only once the
// chunk is released and that count is zero; other chunks' data stays
// reachable through the pointer, so for them they do nothing.
func (c *Chunk) Pin() {
	switch {
	case c.store.tier != nil:
		c.Ref()
	case c.recycle:
		if c.bufRefs.Add(1) <= 1 {
			panic("chunkstore: Pin on a released chunk")
		}
	}
}

// NeedsPin reports whether Pin does anything: false for a chunk in memory
// whose buffer is not reused, as a holder of the pointer keeps the data
// reachable without a pin.
func (c *Chunk) NeedsPin() bool { return c.store.tier != nil || c.recycle }

// PinHoldsChunk reports whether a pin holds the chunk itself (a reference,
// in the tiered modes), so that a pin never unpinned keeps the chunk in the
// store, and on disk, for good. Otherwise a lost pin only keeps the
// chunk's buffer from being reused, and the collector takes it.
func (c *Chunk) PinHoldsChunk() bool { return c.store.tier != nil }

// Unpin undoes Pin.
func (c *Chunk) Unpin() {
	switch {
	case c.store.tier != nil:
		c.Unref()
	case c.recycle:
		c.dropBufRef()
	}
}

// KeepForSnapshot keeps the chunk's data readable for a snapshot that may
// still show an item whose reference to the chunk is being dropped. The
// caller must hold a reference (or a lock under which one is held). In the
// tiered modes it pins the chunk and returns true: the caller unpins it
// once the snapshot is released. In memory mode the snapshot's copy of the
// item keeps the data reachable; a chunk whose buffer would be reused
// once released has its buffer left to the collector instead, and it
// returns false. (A pin would hold the buffer until the snapshot is
// released, where the collector can free it as soon as the snapshot has
// yielded the item: a checkpoint under load takes many seconds.)
func (c *Chunk) KeepForSnapshot() bool {
	if c.store.tier != nil {
		c.Ref()
		return true
	}
	if c.recycle {
		c.noReuse.Store(true)
	}
	return false
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
