package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
)

// InsertStream implements ReverbService. Requests are handled one at a time,
// in order. Each item is confirmed (its key sent back) only once it is in
// its table; a separate goroutine sends confirmations so that a blocked
// insert never holds back the keys of items already applied.
func (s *Server) InsertStream(stream reverbpb.ReverbService_InsertStreamServer) error {
	ctx := stream.Context()
	is := &insertStream{srv: s, held: make(map[uint64]*chunkstore.Chunk)}
	defer is.releaseAll()

	conf := newConfirmer(stream.Send)
	if s.wal != nil {
		// Under fsync always a key is confirmed only once its item is on
		// disk, under the other policies once its record is written to
		// the log's file; the confirmer waits, so the stream reads on
		// meanwhile and every stream's items share the writes and
		// fsyncs (group commit).
		conf.durable = func(lsn uint64) error { return s.wal.WaitDurable(ctx, lsn) }
	}
	defer conf.close()

	// Requests are decoded into recycled insertRequests: a handled one
	// goes back to spare, and the receiving goroutine takes it from there
	// (a writer's requests often carry a hundred items, and their slices
	// would otherwise be grown anew for each).
	spare := make(chan *insertRequest, 2)
	reqs := recvLoop(ctx, func() (*insertRequest, error) {
		var m *insertRequest
		select {
		case m = <-spare:
		default:
			m = new(insertRequest)
		}
		return m, stream.RecvMsg(m) // decoded by codec
	})
	for {
		var r recvResult[insertRequest]
		select {
		case r = <-reqs:
		case <-ctx.Done():
			// The client cancelled or went away. recvLoop may have ended
			// without handing over its last result, so wait for nothing
			// more from it; the deferred calls release what the stream
			// held.
			return toStatus(ctx.Err())
		case <-s.closing:
			conf.close()
			return toStatus(errShuttingDown)
		}
		if errors.Is(r.err, io.EOF) {
			// Half-close: every item received is applied; send the last
			// confirmations before finishing OK.
			return conf.close()
		}
		if r.err != nil {
			return r.err
		}
		if err := is.handle(ctx, r.msg, conf.add); err != nil {
			conf.close()
			if ctx.Err() == nil {
				s.log.Debug("insert stream failed", "err", err)
			}
			return toStatus(err)
		}
		if r.msg.reset() {
			select {
			case spare <- r.msg:
			default:
			}
		}
		if err := conf.waitRoom(ctx, s.closing); err != nil {
			conf.close()
			return toStatus(err)
		}
	}
}

// insertStream is the state of one InsertStream: the chunks it holds for
// its writer. Not safe for concurrent use.
type insertStream struct {
	srv  *Server
	held map[uint64]*chunkstore.Chunk
	keys []uint64 // scratch for prefetch
}

// handle processes one request: store its chunks, insert its items in order
// (waiting on rate limiters), then drop held chunks not named in
// keep_chunk_keys. confirm is called with each key once its item is applied,
// with the write-ahead log position the confirmation must wait for (0 for
// none).
func (is *insertStream) handle(ctx context.Context, req *insertRequest, confirm func(key, lsn uint64)) error {
	if req.err != nil {
		return req.err
	}
	if len(req.chunks) == 0 && len(req.items) == 0 {
		return fmt.Errorf("%w: request has neither chunks nor items", ErrInvalidRequest)
	}
	if len(req.chunks) >= 8 {
		for i := range req.chunks {
			is.srv.chunks.Prefetch(req.chunks[i].meta.Key)
		}
	}
	for _, ch := range req.chunks {
		if _, ok := is.held[ch.meta.Key]; ok {
			continue // the first copy on a stream wins
		}
		if ch.fromStore {
			is.held[ch.meta.Key] = is.srv.chunks.InsertOwned(ch.meta, ch.enc)
		} else {
			is.held[ch.meta.Key] = is.srv.chunks.InsertEncoded(ch.meta, ch.enc)
		}
	}
	if len(req.items) == 0 {
		// Reverb ignores keep_chunk_keys on chunk-only requests.
		return nil
	}
	is.prefetch(req.items)
	for i := range req.items {
		it := &req.items[i]
		if err := is.insert(ctx, i, it); err != nil {
			return err
		}
		if w := is.srv.wal; w != nil {
			if err := w.Err(); err != nil {
				return fmt.Errorf("items[%d] (key %d) is in its table but the write-ahead log failed: %w", i, it.key, err)
			}
		}
		confirm(it.key, is.srv.durableLSN())
	}
	return is.keep(req.keep)
}

// prefetch warms the key indexes of the tables items go to (see
// table.Prefetch). Only requests of at least 8 items that all go to one
// table are prefetched, which is what writers send.
func (is *insertStream) prefetch(items []wireItem) {
	if len(items) < 8 {
		return
	}
	keys := is.keys[:0]
	name := items[0].table
	for i := range items {
		if items[i].table != name {
			return
		}
		keys = append(keys, items[i].key)
	}
	is.keys = keys
	if t, ok := is.srv.tables[name]; ok {
		t.Prefetch(keys)
	}
}

// insert adds request item i.
func (is *insertStream) insert(ctx context.Context, i int, it *wireItem) error {
	t, ok := is.srv.tables[it.table]
	if !ok {
		_, err := is.srv.table(fmt.Sprintf("items[%d].table", i), it.table)
		return err
	}
	chunks, err := is.itemChunks(i, it.traj)
	if err != nil {
		return err
	}
	if err := t.CheckPriority(it.priority); err != nil {
		return fmt.Errorf("items[%d].priority: %w", i, err)
	}
	for _, c := range chunks {
		c.Ref()
	}
	item := table.Item{
		Key:        it.key,
		Priority:   it.priority,
		Trajectory: it.traj,
		Chunks:     chunks,
	}
	if err := t.Insert(ctx, item); err != nil {
		for _, c := range chunks {
			c.Unref()
		}
		return fmt.Errorf("items[%d] (key %d, table %q): %w", i, it.key, it.table, err)
	}
	return nil
}

// itemChunks checks the encoded trajectory of request item i against the
// chunks the stream holds and returns its distinct chunks in order of first
// appearance (without taking references).
func (is *insertStream) itemChunks(i int, traj []byte) ([]*chunkstore.Chunk, error) {
	chunks, err := checkTrajectory(traj, is.held)
	if err != nil {
		if err.notHeld {
			return nil, fmt.Errorf("%w: items[%d].flat_trajectory.%s: chunk %d is not held by this stream", ErrChunkNotHeld, i, err.field, err.key)
		}
		return nil, fmt.Errorf("%w: items[%d].flat_trajectory.%s", ErrInvalidRequest, i, err.reason())
	}
	return chunks, nil
}

// trajError says what checkTrajectory found wrong, and where: field is
// relative to the FlatTrajectory ("columns[2].chunk_slices[0]"), and
// detail continues it (".index: ...", ": rows ... out of range").
type trajError struct {
	field, detail string
	notHeld       bool   // the slice names a chunk chunks does not hold
	key           uint64 // that chunk
}

func (e *trajError) reason() string { return e.field + e.detail }

// checkTrajectory checks an encoded trajectory as an insert and a restore
// both do: columns with slices, the squeeze rule, and every slice within a
// chunk of chunks. It returns the distinct chunks in order of first
// appearance (without taking references). Field names are formatted only
// for errors: building them for every item, column and slice cost 6% of
// the server's CPU on small items.
func checkTrajectory(traj []byte, chunks map[uint64]*chunkstore.Chunk) ([]*chunkstore.Chunk, *trajError) {
	var cs chunkList
	j := 0
	for rest := traj; ; j++ {
		col, r, ok := nextMessage(rest, trajColumnsField)
		if !ok {
			break
		}
		rest = r
		squeeze, n := columnSqueeze(col)
		if n == 0 {
			return nil, &trajError{field: fmt.Sprintf("columns[%d].chunk_slices", j), detail: ": column has no chunk slices"}
		}
		k := 0
		for cr := col; ; k++ {
			b, r, ok := nextMessage(cr, columnSlicesField)
			if !ok {
				break
			}
			cr = r
			sl := parseSlice(b)
			if squeeze && (n != 1 || sl.length != 1) {
				return nil, &trajError{field: fmt.Sprintf("columns[%d].squeeze", j), detail: ": a squeezed column needs exactly one slice of length 1"}
			}
			c, ok := chunks[sl.chunkKey]
			if !ok {
				return nil, &trajError{field: fmt.Sprintf("columns[%d].chunk_slices[%d].chunk_key", j, k), notHeld: true, key: sl.chunkKey}
			}
			if err := checkSlice(sl, c); err != nil {
				return nil, &trajError{field: fmt.Sprintf("columns[%d].chunk_slices[%d]", j, k), detail: err.Error()}
			}
			cs.add(c)
		}
	}
	if j == 0 {
		return nil, &trajError{field: "columns", detail: ": item has no columns"}
	}
	return cs.cs, nil
}

// checkSlice checks a slice against its chunk. Its error text continues a
// field name: ".index: ...", ".offset: ...", ": rows ... out of range".
func checkSlice(sl trajSlice, c *chunkstore.Chunk) error {
	idx := int(sl.index)
	if n := c.NumTensors(); idx < 0 || idx >= n {
		return fmt.Errorf(".index: tensor index %d out of range: chunk %d has %d tensors", idx, c.Key(), n)
	}
	off, length := int64(sl.offset), int64(sl.length)
	if off < 0 {
		return fmt.Errorf(".offset: must be >= 0, got %d", off)
	}
	if length < 1 {
		return fmt.Errorf(".length: must be >= 1, got %d", length)
	}
	if rows, ok := c.Rows(idx); ok && off+length > rows {
		return fmt.Errorf(": rows [%d, %d) out of range: chunk %d tensor %d has %d rows", off, off+length, c.Key(), idx, rows)
	}
	return nil
}

// trajectoryChunks returns the distinct chunks the encoded trajectory traj
// names, in order of first appearance, each with a new reference for the
// caller. lookup finds a chunk by key (without a reference of its own to
// hand over). If lookup finds no chunk for a key, trajectoryChunks takes no
// reference and returns that key and false.
func trajectoryChunks(traj []byte, lookup func(key uint64) *chunkstore.Chunk) (cs []*chunkstore.Chunk, missing uint64, ok bool) {
	var l chunkList
	for sl := range slicesOf(traj) {
		c := lookup(sl.chunkKey)
		if c == nil {
			return nil, sl.chunkKey, false
		}
		l.add(c)
	}
	for _, c := range l.cs {
		c.Ref()
	}
	return l.cs, 0, true
}

func unrefAll(cs []*chunkstore.Chunk) {
	for _, c := range cs {
		c.Unref()
	}
}

// chunkList collects the distinct chunks of an item in order of first
// appearance. The list of a single chunk is the chunk's own (Chunk.List):
// most items name one chunk, and this spares the collector a heap object
// per item. Past smallChunkList chunks a map indexes them: a list scanned
// for each slice cost N²/2 comparisons for an item of N slices over N
// chunks (1.35 s of CPU for 100,000, from a request of 2.4 MiB).
type chunkList struct {
	cs   []*chunkstore.Chunk
	seen map[*chunkstore.Chunk]struct{}
}

const smallChunkList = 16

// add adds c at the end unless the list holds it already.
func (l *chunkList) add(c *chunkstore.Chunk) {
	switch {
	case len(l.cs) == 0:
		l.cs = c.List()
		return
	case l.cs[len(l.cs)-1] == c: // slices of one chunk come together
		return
	case l.seen == nil && len(l.cs) < smallChunkList:
		if slices.Contains(l.cs, c) {
			return
		}
	default:
		if l.seen == nil {
			l.seen = make(map[*chunkstore.Chunk]struct{}, 2*len(l.cs))
			for _, x := range l.cs {
				l.seen[x] = struct{}{}
			}
		}
		if _, ok := l.seen[c]; ok {
			return
		}
		l.seen[c] = struct{}{}
	}
	l.cs = append(l.cs, c)
}

// keep drops every held chunk not in keys, then checks that every key in
// keys was held (and listed once).
func (is *insertStream) keep(keys []uint64) error {
	// A writer keeps a few chunks (its keep-alive window): scanning a short
	// list costs less than a set built for every request.
	kept := func(k uint64) bool { return slices.Contains(keys, k) }
	if len(keys) > smallKeep {
		set := make(map[uint64]struct{}, len(keys))
		for _, k := range keys {
			set[k] = struct{}{}
		}
		kept = func(k uint64) bool { _, ok := set[k]; return ok }
	}
	for k, c := range is.held {
		if !kept(k) {
			c.Unref()
			delete(is.held, k)
		}
	}
	if len(is.held) == len(keys) {
		return nil
	}
	seen := make(map[uint64]bool, len(keys))
	for i, k := range keys {
		if seen[k] {
			return fmt.Errorf("%w: keep_chunk_keys[%d]: chunk %d is listed twice", ErrChunkNotHeld, i, k)
		}
		seen[k] = true
		if _, ok := is.held[k]; !ok {
			return fmt.Errorf("%w: keep_chunk_keys[%d]: chunk %d is not held by this stream", ErrChunkNotHeld, i, k)
		}
	}
	return fmt.Errorf("%w: keep_chunk_keys: kept %d chunks, expected %d", ErrChunkNotHeld, len(is.held), len(keys))
}

// smallKeep: keep_chunk_keys lists up to this long are scanned, not hashed.
const smallKeep = 16

func (is *insertStream) releaseAll() {
	for k, c := range is.held {
		c.Unref()
		delete(is.held, k)
	}
}

// confirmer sends item keys back on an insert stream from its own goroutine,
// batching whatever keys accumulated while the previous send was in flight.
type confirmer struct {
	send func(*reverbpb.InsertStreamResponse) error
	// durable, if set, waits until the log holds every record up to lsn
	// on disk; keys are sent only after.
	durable func(lsn uint64) error

	// maxUnsent bounds keys (see waitRoom).
	maxUnsent int

	mu      sync.Mutex
	keys    []uint64 // guarded by mu
	lsn     uint64   // guarded by mu; the greatest lsn of keys
	err     error    // guarded by mu; the first send error
	wake    chan struct{}
	room    chan struct{} // signalled when run takes keys
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// maxUnsentConfirms is the most keys an insert stream holds for a client
// that does not read its confirmations (8 MiB of them) before it stops
// reading the client's requests. Generous: a client that sends its items
// first and reads the confirmations only after its last request, as a
// simple one may, must not block before a million items.
const maxUnsentConfirms = 1 << 20

func newConfirmer(send func(*reverbpb.InsertStreamResponse) error) *confirmer {
	c := &confirmer{
		send:      send,
		maxUnsent: maxUnsentConfirms,
		wake:      make(chan struct{}, 1),
		room:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	go c.run()
	return c
}

// waitRoom waits while maxUnsent keys or more wait to be sent: behind a
// send that the client's flow control holds, which a client that sends
// items and never reads its confirmations does. The keys used to pile up
// without bound (8 bytes an item, for as long as the rate limiter admits
// items), where gRPC's flow control would have held the client's
// requests back had the stream stopped reading them. It returns early
// with ctx's error, or errShuttingDown once closing is closed.
func (c *confirmer) waitRoom(ctx context.Context, closing <-chan struct{}) error {
	for {
		c.mu.Lock()
		n := len(c.keys)
		c.mu.Unlock()
		if n < c.maxUnsent {
			return nil
		}
		select {
		case <-c.room:
		case <-ctx.Done():
			return ctx.Err()
		case <-closing:
			return errShuttingDown
		}
	}
}

func (c *confirmer) add(key, lsn uint64) {
	c.mu.Lock()
	c.keys = append(c.keys, key)
	c.lsn = max(c.lsn, lsn)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *confirmer) run() {
	defer close(c.done)
	for {
		stopping := false
		select {
		case <-c.wake:
		case <-c.stop:
			stopping = true
		}
		c.mu.Lock()
		keys, lsn := c.keys, c.lsn
		c.keys = nil
		failed := c.err != nil
		c.mu.Unlock()
		select {
		case c.room <- struct{}{}:
		default:
		}
		if len(keys) > 0 && !failed && c.durable != nil && lsn > 0 {
			if err := c.durable(lsn); err != nil {
				c.mu.Lock()
				// A status: close's error is the stream's at a
				// half-close (INTERNAL, or UNAVAILABLE if the log closed).
				c.err = toStatus(fmt.Errorf("write-ahead log: %w", err))
				c.mu.Unlock()
				failed = true
			}
		}
		if len(keys) > 0 && !failed {
			if err := c.send(&reverbpb.InsertStreamResponse{Keys: keys}); err != nil {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
			}
		}
		if stopping {
			return
		}
	}
}

// close sends the keys still pending, stops the goroutine, waits for it and
// returns the first send error. Idempotent; no add may follow.
func (c *confirmer) close() error {
	c.stopped.Do(func() { close(c.stop) })
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// recvResult is one message (or the final error) read from a stream.
type recvResult[T any] struct {
	msg *T
	err error
}

// recvLoop reads a stream from its own goroutine, so that handlers can wait
// for a request and for shutdown at once. The goroutine ends after the
// first error, or when ctx (the stream's context, cancelled when the
// handler returns) ends. Once ctx is done it may end without handing over
// its last result, so a handler must wait on ctx.Done too.
func recvLoop[T any](ctx context.Context, recv func() (*T, error)) <-chan recvResult[T] {
	ch := make(chan recvResult[T])
	go func() {
		for {
			m, err := recv()
			select {
			case ch <- recvResult[T]{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}
