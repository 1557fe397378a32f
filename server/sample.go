package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/chunkstore"
	"github.com/reverie-rl/reverie/internal/table"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	// firstSampleBatch is the size of the first table batch of a request;
	// later batches double, as in Reverb.
	firstSampleBatch = 128
	// maxResponseChunkBytes starts a new response message once the chunks
	// in the current one pass this size, to keep messages bounded.
	maxResponseChunkBytes = 2 << 20
)

// SampleStream implements ReverbService. Requests are served one at a time:
// the next is not read until every sample of the current one was sent.
func (s *Server) SampleStream(stream reverbpb.ReverbService_SampleStreamServer) error {
	ctx := stream.Context()
	reqs := recvLoop(ctx, stream.Recv)
	var rb responseBuilder // reused: its buffers keep their size
	for {
		var r recvResult[reverbpb.SampleStreamRequest]
		select {
		case r = <-reqs:
		case <-ctx.Done():
			return toStatus(ctx.Err()) // see recvLoop
		case <-s.closing:
			return toStatus(errShuttingDown)
		}
		if errors.Is(r.err, io.EOF) {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		send := func(m *rawMessage) error { return stream.SendMsg(m) } // sent by codec as it is
		if err := s.serveSampleRequest(ctx, r.msg, &rb, send); err != nil {
			return toStatus(err)
		}
	}
}

// sampleTimeout turns a request's rate_limiter_timeout into a Table.Sample
// timeout: absent or negative waits forever, 0 does not wait, and a positive
// value is milliseconds. (Reverb's server waits forever on 0; see
// docs/compatibility.md.)
func sampleTimeout(t *reverbpb.Timeout) time.Duration {
	// Beyond what a Duration holds (292 years) is forever too, rather
	// than a product that wraps around to a short or negative timeout.
	if t == nil || t.GetMilliseconds() < 0 || t.GetMilliseconds() > math.MaxInt64/int64(time.Millisecond) {
		return -1
	}
	return time.Duration(t.GetMilliseconds()) * time.Millisecond
}

// serveSampleRequest serves one SampleStreamRequest, sending exactly
// num_samples samples, or fewer followed by an error.
func (s *Server) serveSampleRequest(ctx context.Context, req *reverbpb.SampleStreamRequest, rb *responseBuilder, send func(*rawMessage) error) error {
	n := req.GetNumSamples()
	if n <= 0 {
		return fmt.Errorf("%w: num_samples: must be > 0, got %d", ErrInvalidRequest, n)
	}
	t, err := s.table("table", req.GetTable())
	if err != nil {
		return err
	}
	timeout := sampleTimeout(req.GetRateLimiterTimeout())
	batch := min(int64(firstSampleBatch), n)
	for remaining := n; remaining > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		samples, err := t.SampleInto(ctx, rb.samples, int(batch), timeout)
		if err != nil {
			return err
		}
		// A sample is sent only once its effect (times_sampled, a
		// max_times_sampled delete) is on disk under fsync always, and
		// written to the log's file under the other policies, so that a
		// crash (of the machine, or under those policies of the process)
		// cannot make a queue deliver an item twice.
		err = s.waitDurable(ctx)
		if err == nil {
			err = rb.sendSamples(t.Name(), samples, send)
		}
		for i := range samples {
			samples[i].Unpin()
		}
		rb.keepSamples(samples)
		if err != nil {
			return err
		}
		remaining -= int64(len(samples))
		batch = min(2*int64(len(samples)), remaining, maxSampleBatch)
	}
	return nil
}

// Field numbers of SampleStreamResponse and its SampleEntry.
const (
	responseEntriesField = 1
	entryInfoField       = 1
	entryDataField       = 2
	entryEndField        = 3
)

// inlineChunkBytes: chunks at least this big are not copied into a
// response but handed to gRPC as they are stored, each as its own buffer.
const inlineChunkBytes = 16 << 10

// responseBuilder encodes SampleStreamResponses by hand, around the chunk
// encodings as they are stored, so that chunks are never decoded or
// re-encoded on the sample path. Not safe for concurrent use.
type responseBuilder struct {
	buf    []byte              // the response's tags, lengths, infos and small chunks
	bufp   *[]byte             // the pool's handle on buf
	segs   []segment           // the big chunks, and where they go in buf
	chunks int                 // chunk bytes in the response
	info   []byte              // scratch: the encoded SampleInfo of a sample
	encs   [][]byte            // scratch: the chunk encodings of a sample
	owners []*chunkstore.Chunk // scratch: the chunk of each of encs
	// samples is the buffer the stream's samples are taken into
	// (Table.SampleInto), empty between batches.
	samples []table.Sampled
}

// maxKeptSamples bounds the samples buffer a stream keeps between
// batches: one of the largest batch's size (maxSampleBatch).
const maxKeptSamples = 4096

// maxSampleBatch bounds the samples a request takes from its table at
// once. Batches double from firstSampleBatch up to this: each batch is
// taken in one hold of the table's lock and held (pinned) until it is
// sent, so a request for billions of samples must not grow them without
// end. Reverb cuts its batches at 1 MiB of chunk bytes instead.
const maxSampleBatch = maxKeptSamples

// keepSamples keeps the memory of samples, which were sent and unpinned,
// for the stream's next batch, cleared so that it holds on to no chunk.
func (b *responseBuilder) keepSamples(samples []table.Sampled) {
	clear(samples)
	if cap(samples) > maxKeptSamples {
		samples = nil
	}
	b.samples = samples[:0]
}

// segment: big, the encoding of chunk, comes after buf[:end].
type segment struct {
	end   int
	big   []byte
	chunk *chunkstore.Chunk
}

// sendSamples frames samples into responses: each sample's first entry
// carries its info, its chunks follow in order, and the entry holding its
// last chunk has end_of_sequence. A response is sent once its chunks pass
// maxResponseChunkBytes; a chunk is never split. A sample with a chunk
// whose data cannot be read is left out: the others are sent, and then
// the error naming that chunk ends the request.
func (b *responseBuilder) sendSamples(tableName string, samples []table.Sampled, send func(*rawMessage) error) error {
	// firstErr is the error of the first sample whose chunks could not be
	// read.
	var firstErr error
	defer func() { // drop the references to chunks and their bytes
		clear(b.encs[:cap(b.encs)])
		clear(b.owners[:cap(b.owners)])
	}()
	for i := range min(prefetchAhead, len(samples)) {
		prefetchChunks(&samples[i])
	}
nextSample:
	for i := range samples {
		if i+prefetchAhead < len(samples) {
			prefetchChunks(&samples[i+prefetchAhead])
		}
		sm := &samples[i]
		b.encs, b.owners = b.encs[:0], b.owners[:0]
		for _, c := range sm.Item.Chunks {
			enc, err := c.Encoded()
			if err != nil {
				// The sample was taken (its times_sampled counted,
				// perhaps its item deleted): send the batch's others
				// rather than lose them too, and end the request after
				// them.
				if firstErr == nil {
					firstErr = fmt.Errorf("sampling item %d of table %q: %w", sm.Item.Key, tableName, err)
				}
				continue nextSample
			}
			b.encs = append(b.encs, enc)
			b.owners = append(b.owners, c)
		}
		info := appendSampleInfo(b.info[:0], tableName, sm)
		b.info = info
		start := 0
		for j, enc := range b.encs {
			b.chunks += len(enc)
			if b.chunks >= maxResponseChunkBytes && j < len(b.encs)-1 {
				b.appendEntry(info, b.encs[start:j+1], b.owners[start:j+1], false)
				if err := b.flush(send); err != nil {
					return err
				}
				info, start = nil, j+1
			}
		}
		b.appendEntry(info, b.encs[start:], b.owners[start:], true)
		if b.chunks >= maxResponseChunkBytes {
			if err := b.flush(send); err != nil {
				return err
			}
		}
	}
	if err := b.flush(send); err != nil {
		return err
	}
	return firstErr
}

// prefetchAhead is how many samples ahead of the one being framed
// sendSamples asks for the chunk bytes it will copy (a variable for
// BenchmarkSendSamples).
var prefetchAhead = 8

// prefetchChunks asks the CPU to fetch the chunk encodings of sm that
// sendSamples copies into the response. Big chunks are handed to gRPC as
// they are stored (inlineChunkBytes) and are not read here.
func prefetchChunks(sm *table.Sampled) {
	for _, c := range sm.Item.Chunks {
		if c.Size() < inlineChunkBytes {
			c.PrefetchEncoded()
		}
	}
}

// appendEntry appends a SampleEntry to the response: info (if not nil),
// encs (the encodings of owners) as data, and end_of_sequence if end.
func (b *responseBuilder) appendEntry(info []byte, encs [][]byte, owners []*chunkstore.Chunk, end bool) {
	n := 0
	if info != nil {
		n += 1 + protowire.SizeBytes(len(info))
	}
	for _, e := range encs {
		n += 1 + protowire.SizeBytes(len(e))
	}
	if end {
		n += 2
	}
	b.buf = protowire.AppendTag(b.buf, responseEntriesField, protowire.BytesType)
	b.buf = protowire.AppendVarint(b.buf, uint64(n))
	if info != nil {
		b.buf = protowire.AppendTag(b.buf, entryInfoField, protowire.BytesType)
		b.buf = protowire.AppendBytes(b.buf, info)
	}
	for i, e := range encs {
		b.buf = protowire.AppendTag(b.buf, entryDataField, protowire.BytesType)
		if len(e) < inlineChunkBytes {
			b.buf = protowire.AppendBytes(b.buf, e)
			continue
		}
		b.buf = protowire.AppendVarint(b.buf, uint64(len(e)))
		b.segs = append(b.segs, segment{end: len(b.buf), big: e, chunk: owners[i]})
	}
	if end {
		b.buf = protowire.AppendTag(b.buf, entryEndField, protowire.VarintType)
		b.buf = protowire.AppendVarint(b.buf, 1)
	}
}

// flush sends the response built so far, if any, and starts a new one.
func (b *responseBuilder) flush(send func(*rawMessage) error) error {
	if len(b.buf) == 0 {
		return nil
	}
	// gRPC sends the buffers after SendMsg returns, so the response is
	// handed over rather than copied: buf goes to gRPC, which returns it
	// to responseBufs once written, and the next response takes another.
	// Big chunks are handed over as they are stored (stored bytes are
	// not modified while the chunk is live or pinned), each pinned until
	// gRPC frees it: the sample's own pin ends when sendSamples returns,
	// before gRPC has written them.
	if b.bufp == nil {
		b.bufp = new([]byte)
	}
	*b.bufp = b.buf
	rest := mem.NewBuffer(b.bufp, responseBufs)
	var data mem.BufferSlice
	start := 0
	for _, sg := range b.segs {
		if sg.end > start {
			var part mem.Buffer
			part, rest = mem.SplitUnsafe(rest, sg.end-start)
			data = append(data, part)
		}
		data = append(data, handOver(sg))
		start = sg.end
	}
	if start < len(b.buf) {
		data = append(data, rest)
	} else {
		rest.Free()
	}
	b.bufp = responseBufs.Get(0)
	b.buf = *b.bufp
	b.reset()
	return send(&rawMessage{data: data})
}

// handOver returns the buffer of a big chunk in a response. If the chunk's
// bytes may be reused once it is unpinned, it pins the chunk until gRPC
// frees the buffer. gRPC-Go does not free every buffer of a stream that
// ends abnormally (a frame dropped for a stream already cleaned up, data
// queued when its writer exits); where a pin holds the chunk itself, the
// chunk is also unpinned when the buffer is collected, else a sampler
// that cancels would leave chunks in the store and the spill for good.
func handOver(sg segment) mem.Buffer {
	if sg.chunk == nil || !sg.chunk.NeedsPin() {
		return mem.SliceBuffer(sg.big)
	}
	sg.chunk.Pin()
	p := &chunkPin{pin: &pin{chunk: sg.chunk}, b: sg.big}
	if sg.chunk.PinHoldsChunk() {
		runtime.AddCleanup(p, (*pin).release, p.pin)
	}
	return mem.NewBuffer(&p.b, p)
}

// chunkPin is the mem.BufferPool of one handed-over chunk: freeing the
// buffer unpins the chunk.
type chunkPin struct {
	pin *pin
	b   []byte
}

func (p *chunkPin) Get(int) *[]byte { panic("server: chunkPin.Get") } // only freed into
func (p *chunkPin) Put(*[]byte)     { p.pin.release() }

// pin is one pin of a chunk, released once, by gRPC freeing the buffer or
// by the collector's cleanup of a buffer gRPC dropped.
type pin struct {
	chunk    *chunkstore.Chunk
	released atomic.Bool
}

func (p *pin) release() {
	if p.released.CompareAndSwap(false, true) {
		p.chunk.Unpin()
	}
}

func (b *responseBuilder) reset() {
	clear(b.segs) // drop the references to chunk bytes
	b.buf, b.segs, b.chunks = b.buf[:0], b.segs[:0], 0
}

// responseBufs recycles the buffers responses are encoded in, once gRPC
// has written them. Unlike gRPC's own pools it does not zero them: a
// response is always written from the start, and only what was written
// is sent.
var responseBufs = &bufferPool{max: maxKeptResponseBytes}

// maxKeptResponseBytes bounds the encoding buffers kept for reuse: a
// response of small chunks is at most maxResponseChunkBytes plus one
// chunk and the framing.
const maxKeptResponseBytes = maxResponseChunkBytes + 2*inlineChunkBytes

// bufferPool is a mem.BufferPool of growable buffers: Get returns one of
// any capacity (the caller appends to it) and Put keeps those no bigger
// than max.
type bufferPool struct {
	max  int
	pool sync.Pool
}

func (p *bufferPool) Get(length int) *[]byte {
	bp, _ := p.pool.Get().(*[]byte)
	if bp == nil || cap(*bp) < length {
		b := make([]byte, length)
		return &b
	}
	*bp = (*bp)[:length]
	return bp
}

func (p *bufferPool) Put(bp *[]byte) {
	if cap(*bp) > p.max {
		return
	}
	*bp = (*bp)[:0]
	p.pool.Put(bp)
}
