package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/mem"
)

const (
	// writerMaxRequestBytes closes a batch of items once its chunks and
	// items reach this size; a single item with larger chunks still goes
	// out in one request. Reverb's writers close a batch at 40 MiB, but a
	// gRPC-Go server holds each request whole until its last byte arrives
	// (it raises the stream's flow-control window to fit the message), so
	// a backlog of 400 kB items sent 40 MiB at a time parked up to 40 MiB
	// per writer in reverie's server: with 32 writers its RSS peaked at
	// 3.4-4.5 GB against 2.2-2.3 GB at 4 MiB, and its first runs spent
	// 2-4x the CPU per item growing its heap. 1 MiB cost 10-21% of the
	// items/s at 40 kB with 8 writers (3 of 4 rounds); 4 MiB ran level
	// with 40 MiB there (docs/benchmarks-notes.md, "Bugs and oddities seen";
	// bench/client-ab.sh).
	writerMaxRequestBytes = 4 << 20
	// Backoff between attempts to reopen the insert stream: doubling from
	// the minimum to the maximum, back to the minimum after a stream that
	// lived writerBackoffReset.
	writerMinBackoff   = time.Millisecond
	writerMaxBackoff   = time.Second
	writerBackoffReset = 2 * time.Second
)

// run is the writer's background goroutine. It opens an insert stream when
// an item is ready, sends items over it until it fails, and after a
// transient failure puts the unconfirmed items back in the queue and opens
// a new stream after a backoff. Any other failure becomes the writer's
// sticky error.
func (w *TrajectoryWriter) run() {
	defer w.wg.Done()
	backoff := writerMinBackoff
	for {
		if !w.waitForWork() {
			return
		}
		start := time.Now()
		err := w.stream()

		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		if err == nil {
			err = writerStreamErr(nil)
		}
		if retryable(err) && w.client.conn.GetState() == connectivity.Shutdown {
			err = fmt.Errorf("%w: trajectory writer: the client was closed", ErrClosed)
		}
		if !retryable(err) {
			w.err = err
			w.notifyLocked()
			w.mu.Unlock()
			return
		}
		n := w.requeueLocked()
		w.mu.Unlock()

		if time.Since(start) >= writerBackoffReset {
			backoff = writerMinBackoff
		}
		w.log.Warn("trajectory writer: insert stream failed, reconnecting",
			"addr", w.client.addr, "err", err, "backoff", backoff, "unconfirmed_items", n)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, writerMaxBackoff)
	}
}

// waitForWork waits until the first queued item can be sent and reports
// false if the writer is closed first.
func (w *TrajectoryWriter) waitForWork() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if w.closed {
			return false
		}
		if len(w.queue) > 0 && w.queue[0].ready() {
			return true
		}
		if w.waitLocked(w.ctx) != nil {
			return false
		}
	}
}

// requeueLocked moves the items sent on a failed stream back to the queue,
// in creation order, so that they are sent again with their chunks on the
// next stream. It returns how many items now wait.
func (w *TrajectoryWriter) requeueLocked() int {
	if len(w.inflight) > 0 {
		for _, it := range w.inflight {
			w.queue = append(w.queue, it)
		}
		clear(w.inflight)
		slices.SortFunc(w.queue, func(a, b *writerItem) int { return cmp.Compare(a.seq, b.seq) })
		w.notifyLocked()
	}
	return len(w.queue)
}

// stream runs one insert stream until it fails or the writer is closed, and
// returns the failure (nil after Close). A goroutine reads confirmations;
// stream waits for it before returning.
func (w *TrajectoryWriter) stream() error {
	ctx, cancel := context.WithCancel(w.ctx)
	st, err := w.client.rpc.InsertStream(ctx, grpc.ForceCodecV2(streamCodec{}))
	if err != nil {
		cancel()
		return fromRPC(context.Background(), err)
	}
	recvDone := make(chan struct{})
	var recvErr error // written before recvDone is closed
	go func() {
		defer close(recvDone)
		var resp insertResponse
		for {
			if err := st.RecvMsg(&resp); err != nil {
				recvErr = err
				return
			}
			w.confirm(resp.GetKeys())
		}
	}()
	defer func() {
		cancel()
		<-recvDone
	}()

	sc := w.newStreamChunks()
	for {
		req := w.nextRequest(sc, recvDone)
		if req == nil {
			select {
			case <-recvDone:
				return writerStreamErr(recvErr)
			default:
				return nil // closed
			}
		}
		if err := st.SendMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream ended; Recv has its status.
				<-recvDone
				return writerStreamErr(recvErr)
			}
			return fromRPC(context.Background(), err)
		}
	}
}

// writerStreamErr converts the error that ended an insert stream's reads.
// The server never ends an insert stream OK while the writer has not
// half-closed it, so that is treated as a transient failure.
func writerStreamErr(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return &Error{Sentinel: ErrUnavailable, Code: codes.Unavailable, Msg: "insert stream ended by the server"}
	}
	return fromRPC(context.Background(), err)
}

// confirm removes confirmed items. Keys of items the writer does not know
// (already confirmed) are ignored.
func (w *TrajectoryWriter) confirm(keys []uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.inflight)
	for _, k := range keys {
		if it, ok := w.inflight[k]; ok {
			delete(w.inflight, k)
			for _, ch := range it.chunks {
				ch.dropUser()
			}
		}
	}
	if len(w.inflight) != n {
		w.notifyLocked()
	}
}

// streamChunks tracks the chunks the server holds for one insert stream.
// A chunk is held when its heldBy is the stream's id.
type streamChunks struct {
	id   uint64
	held []*writerChunk // every chunk held after the last request
	next []*writerChunk // spare slice for the next held
}

func (w *TrajectoryWriter) newStreamChunks() *streamChunks {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks++
	return &streamChunks{id: w.marks}
}

// nextRequest waits until the first queued item can be sent and builds the
// next request from the longest run of sendable items at the front of the
// queue (up to writerMaxRequestBytes): the chunks they reference that the
// server does not hold for this stream, the items, and keep_chunk_keys.
// The items move to the in-flight set. It returns nil when the writer is
// closed or the stream's reader has stopped (recvDone).
//
// keep_chunk_keys lists the chunks held for this stream that the column
// histories or the items still queued reference: those may be needed by a
// later item. The server releases every other chunk after the request's
// items, and so does sc.
func (w *TrajectoryWriter) nextRequest(sc *streamChunks, recvDone <-chan struct{}) *insertRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if w.closed {
			return nil
		}
		select {
		case <-recvDone:
			return nil
		default:
		}
		if len(w.queue) > 0 && w.queue[0].ready() {
			break
		}
		changed := w.waitChanLocked()
		w.mu.Unlock()
		select {
		case <-changed:
		case <-recvDone:
		case <-w.ctx.Done():
		}
		w.mu.Lock()
	}

	req := &insertRequest{}
	size, n := 0, 0
	for n < len(w.queue) && w.queue[n].ready() && size < writerMaxRequestBytes {
		it := w.queue[n]
		for _, ch := range it.chunks {
			if ch.heldBy != sc.id {
				ch.heldBy = sc.id
				sc.held = append(sc.held, ch)
				if ch.encBuf != nil {
					// The request's own reference: the writer may free its
					// one while gRPC still sends the bytes.
					ch.encBuf.Ref()
					req.bufs = append(req.bufs, make([]mem.Buffer, len(req.chunks)+1-len(req.bufs))...)
					req.bufs[len(req.chunks)] = ch.encBuf
				}
				if ch.encSmall.buf != nil {
					// Likewise, until marshal has copied the bytes.
					ch.encSmall.ref()
					req.smalls = append(req.smalls, &ch.encSmall)
				}
				req.chunks = append(req.chunks, ch.enc)
				size += len(ch.enc)
			}
		}
		req.items = append(req.items, it.enc)
		size += len(it.enc)
		w.inflight[it.key] = it
		w.queue[n] = nil
		n++
	}
	w.queue = w.queue[n:]

	w.marks++
	mark := w.marks
	kept := sc.next[:0]
	keep := func(ch *writerChunk) {
		if ch.heldBy == sc.id && ch.keptBy != mark {
			ch.keptBy = mark
			kept = append(kept, ch)
		}
	}
	for _, col := range w.colList {
		for _, c := range col.hist {
			if c != nil {
				keep(c.chunk)
			}
		}
	}
	for _, it := range w.queue {
		for _, ch := range it.chunks {
			keep(ch)
		}
	}
	for _, ch := range sc.held {
		if ch.keptBy != mark {
			ch.heldBy = 0 // released by the server after this request
		}
	}
	clear(sc.held)
	sc.held, sc.next = kept, sc.held[:0]
	if len(kept) > 0 {
		req.keep = make([]uint64, len(kept))
		for i, ch := range kept {
			req.keep[i] = ch.key
		}
		slices.Sort(req.keep)
	}
	return req
}
