package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/mem"
)

// Sampler defaults, as in Reverb's Sampler::Options.
const (
	// DefaultMaxInFlightSamplesPerWorker is the number of samples a worker
	// asks for in one SampleStreamRequest when
	// SamplerOptions.MaxInFlightSamplesPerWorker is zero.
	DefaultMaxInFlightSamplesPerWorker = 100
	// DefaultMaxSamplesPerStream is the number of samples after which a
	// worker abandons its stream and opens a new one, when
	// SamplerOptions.MaxSamplesPerStream is zero.
	DefaultMaxSamplesPerStream = 10_000
	// WaitForever, as SamplerOptions.RateLimiterTimeout, lets samples wait
	// for the rate limiter without limit. The zero value means the same.
	WaitForever time.Duration = -1
)

// Backoff between attempts to reopen a sample stream after a transient
// failure (UNAVAILABLE or CANCELLED).
const (
	minRetryBackoff = time.Millisecond
	maxRetryBackoff = time.Second
)

// drainRecvTimeout is how long, once the sampler has stopped on a terminal
// error, a worker waits for each further response to a request it has in
// flight before it cancels the request.
const drainRecvTimeout = time.Second

// ErrMalformedSample is wrapped by the error a Sampler returns when a
// sample cannot be decoded: missing info or chunks, a chunk that does not
// decode, or chunk slices that do not fit the chunk's tensors. Such data was
// written by a faulty writer or corrupted; the sampler stops.
var ErrMalformedSample = errors.New("client: malformed sample")

// SamplerOptions configures a Sampler.
type SamplerOptions struct {
	// Table to sample from; required.
	Table string
	// NumWorkers is the number of sample streams run in parallel. Zero means
	// 1. When MaxSamples is set, no more workers are started than are needed
	// to have all of MaxSamples in flight at once
	// (ceil(MaxSamples / MaxInFlightSamplesPerWorker)).
	NumWorkers int
	// MaxInFlightSamplesPerWorker is the most samples a worker requests in
	// one SampleStreamRequest, and so the most it holds at a time. Zero means
	// DefaultMaxInFlightSamplesPerWorker (100). The sampler buffers up to
	// 2 × NumWorkers × MaxInFlightSamplesPerWorker decoded samples (a queue
	// of NumWorkers batches of at most MaxInFlightSamplesPerWorker each, the
	// samples a response completed, and one more batch held by each worker
	// that waits for room in it), plus the rest of the batch each caller of
	// Next has begun on.
	MaxInFlightSamplesPerWorker int
	// RateLimiterTimeout bounds how long the server may wait for the table's
	// rate limiter before the first sample of a request (that is, while the
	// table is empty or sampling too fast). Zero or negative (WaitForever)
	// waits without limit. A positive value is rounded up to whole
	// milliseconds. When it expires, iteration ends with an error wrapping
	// ErrRateLimiterTimeout, after every sample received; like Reverb's
	// datasets, which turn this into end-of-sequence, callers can treat it
	// as "no more data for now" and make a new Sampler later.
	RateLimiterTimeout time.Duration
	// MaxSamples is the total number of samples the sampler returns; zero
	// means unlimited. The requests in flight, across all workers, never
	// ask for more than MaxSamples less the samples delivered, so when no
	// stream fails in the middle of a request the table sees exactly
	// MaxSamples samples once they have all been returned. A stream that
	// fails in the middle of a request (a transient failure, such as a
	// connection reset, that reopens it) loses the samples the server had
	// sent on it that had not arrived: the table counted them, and the
	// sampler asks for as many again, so the table can see more than
	// MaxSamples. Samples lost on Close, or with a request cancelled after a
	// terminal error (see Sampler), are counted by the table but neither
	// returned nor asked for again.
	MaxSamples int64
	// MaxSamplesPerStream is the number of samples after which a worker
	// cancels its stream and opens a new one, which spreads load when the
	// server is behind a load balancer. Zero means DefaultMaxSamplesPerStream
	// (10,000).
	MaxSamplesPerStream int
	// Logger receives warnings about reopened streams. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// SampleInfo describes one sampled item, as the server reported it at the
// time of sampling.
type SampleInfo struct {
	// Key is the item's key.
	Key uint64
	// Table is the table the item was sampled from.
	Table string
	// Priority is the item's priority when it was sampled.
	Priority float64
	// Probability is the probability with which the table's sampler picked
	// the item (1 for deterministic selectors such as FIFO).
	Probability float64
	// TableSize is the number of items in the table when it was sampled.
	TableSize int64
	// TimesSampled counts the item's samples including this one.
	TimesSampled int32
	// RateLimited is true when the sample had to wait for the rate limiter.
	RateLimited bool
	// InsertedAt is when the server first inserted the item; zero if the
	// server did not say.
	InsertedAt time.Time
}

// Sample is one sampled item: its info and its decoded columns, in the
// order of the item's trajectory columns. A column is the concatenation of
// the chunk rows the item references, shape [T, ...]; columns marked
// squeeze (single-row columns, as Client.Insert writes) have the leading
// axis removed.
type Sample struct {
	Info    SampleInfo
	Columns []Tensor
}

// Batch is n samples with their columns stacked: Columns[i] has shape
// [n, ...] where ... is column i's shape in every sample.
type Batch struct {
	Infos   []SampleInfo
	Columns []Tensor
}

// Sampler streams samples of one table from the server over
// NumWorkers SampleStreams, decodes them and buffers them for the caller.
// Workers start when the Sampler is made; Close stops them. Samples already
// taken from the table but not yet returned are lost when the Sampler is
// closed, as in Reverb.
//
// Workers exit by themselves after MaxSamples samples or a terminal error;
// call Close in any case. A terminal error of one worker (see Next) stops
// every worker from sending new requests, but drops no sample: samples
// already received are returned before the error, however long the caller
// takes to read them, and the requests other workers have in flight are
// read to their end first, waiting up to a second for each further
// response (time spent waiting for the caller to make room does not
// count). A request whose next response takes longer, such as one the
// table cannot serve while no rate limiter timeout is set, is cancelled;
// a sample the server sends just as it is cancelled is taken from the
// table but lost. A Sampler is safe for concurrent use; each sample is
// returned once.
//
// Differences from Reverb's Sampler: the MaxSamples budget is reserved per
// request rather than per stream, so several workers share a small budget
// without over-sampling; and a rate limiter timeout always ends iteration
// (Reverb silently reopens the stream when no caller is waiting).
type Sampler struct {
	c   *Client
	log *slog.Logger

	table       string
	inFlight    int64
	perStream   int64
	maxSamples  int64 // math.MaxInt64 when unlimited
	timeout     *reverbpb.Timeout
	workerCount int

	ctx    context.Context // workers' context; cancelled by Close, which drops what they hold
	cancel context.CancelFunc
	// halt ends (a child of ctx) on Close or a terminal error: workers send
	// no new request, but a terminal error lets them deliver what they hold
	// and read the requests they have in flight (see drainGuard).
	halt   context.Context
	stop   context.CancelFunc
	out    chan []Sample // decoded samples, a response's at a time; closed when every worker has exited
	exited chan struct{} // closed after out is closed
	wg     sync.WaitGroup

	nextMu sync.Mutex
	buf    []Sample // what is left of the last batch Next took from out
	// taking is read-held by each Next waiting on out, until it has put
	// the rest of the batch it took in buf: a Next that finds out closed
	// takes it for writing, so that it looks at buf only once every
	// batch taken before the close is there.
	taking sync.RWMutex

	mu        sync.Mutex
	requested int64         // samples requested from the server or delivered
	delivered int64         // samples pushed to out
	budget    chan struct{} // closed and replaced when requested drops
	err       error         // first terminal error
	closed    bool
	closeOnce sync.Once
}

// NewSampler starts a sampler of opts.Table. It fails with
// ErrInvalidArgument for a missing table name or negative options; an
// unknown table is reported by the first Next.
func (c *Client) NewSampler(opts SamplerOptions) (*Sampler, error) {
	switch {
	case opts.Table == "":
		return nil, fmt.Errorf("%w: NewSampler: no table", ErrInvalidArgument)
	case opts.NumWorkers < 0:
		return nil, fmt.Errorf("%w: NewSampler: NumWorkers %d < 0", ErrInvalidArgument, opts.NumWorkers)
	case opts.MaxInFlightSamplesPerWorker < 0:
		return nil, fmt.Errorf("%w: NewSampler: MaxInFlightSamplesPerWorker %d < 0", ErrInvalidArgument, opts.MaxInFlightSamplesPerWorker)
	case opts.MaxSamples < 0:
		return nil, fmt.Errorf("%w: NewSampler: MaxSamples %d < 0", ErrInvalidArgument, opts.MaxSamples)
	case opts.MaxSamplesPerStream < 0:
		return nil, fmt.Errorf("%w: NewSampler: MaxSamplesPerStream %d < 0", ErrInvalidArgument, opts.MaxSamplesPerStream)
	}
	s := &Sampler{
		c:          c,
		log:        opts.Logger,
		table:      opts.Table,
		inFlight:   int64(opts.MaxInFlightSamplesPerWorker),
		perStream:  int64(opts.MaxSamplesPerStream),
		maxSamples: opts.MaxSamples,
		budget:     make(chan struct{}),
		exited:     make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.inFlight == 0 {
		s.inFlight = DefaultMaxInFlightSamplesPerWorker
	}
	if s.perStream == 0 {
		s.perStream = DefaultMaxSamplesPerStream
	}
	if s.maxSamples == 0 {
		s.maxSamples = math.MaxInt64
	}
	s.workerCount = max(opts.NumWorkers, 1)
	if opts.MaxSamples > 0 {
		needed := ceilDiv(opts.MaxSamples, s.inFlight)
		s.workerCount = int(min(int64(s.workerCount), needed))
	}
	if d := opts.RateLimiterTimeout; d <= 0 {
		s.timeout = timeoutProto(-1)
	} else {
		s.timeout = &reverbpb.Timeout{Milliseconds: ceilDiv(int64(d), int64(time.Millisecond))}
	}
	// A batch holds at most one request's samples, so out buffers at most
	// MaxInFlightSamplesPerWorker samples per worker; each worker may hold
	// one more batch while it waits for room.
	s.out = make(chan []Sample, s.workerCount)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.halt, s.stop = context.WithCancel(s.ctx)
	s.wg.Add(s.workerCount)
	for i := range s.workerCount {
		go s.runWorker(i)
	}
	go func() {
		s.wg.Wait()
		close(s.out)
		close(s.exited)
	}()
	return s, nil
}

// ceilDiv returns a/b rounded up, for a >= 0 and b > 0, without the
// overflow of (a+b-1)/b when a is near math.MaxInt64.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// Next returns the next sample. It blocks until one is available or ctx
// ends. After MaxSamples samples it returns io.EOF. A terminal failure is
// returned once the samples received before it, and those of the requests
// then in flight (see Sampler), have been returned: it
// wraps ErrRateLimiterTimeout when the rate limiter timed out,
// ErrTableNotFound for an unknown table, ErrMalformedSample for data that
// does not decode, or another of the package's errors. After Close it
// returns ErrClosed. The error is sticky: later calls return it again.
func (s *Sampler) Next(ctx context.Context) (Sample, error) {
	if s.isClosed() {
		return Sample{}, fmt.Errorf("%w: sampler", ErrClosed)
	}
	if smp, ok := s.takeBuffered(); ok {
		return smp, nil
	}
	s.taking.RLock()
	select {
	case batch, ok := <-s.out:
		if !ok {
			s.taking.RUnlock()
			// Another caller may have taken the last batch and not yet
			// left its rest in buf: wait for it (out is closed, so every
			// caller holding taking is about to let go).
			s.taking.Lock()
			//lint:ignore SA2001 the empty section is a barrier
			s.taking.Unlock()
			if smp, ok := s.takeBuffered(); ok {
				return smp, nil
			}
			return Sample{}, s.endErr()
		}
		if len(batch) > 1 {
			s.nextMu.Lock()
			if len(s.buf) == 0 {
				s.buf = batch[1:]
			} else {
				s.buf = append(s.buf, batch[1:]...)
			}
			s.nextMu.Unlock()
		}
		s.taking.RUnlock()
		return batch[0], nil
	case <-ctx.Done():
		s.taking.RUnlock()
		return Sample{}, ctx.Err()
	}
}

// takeBuffered returns a sample left of the last batch taken from out.
func (s *Sampler) takeBuffered() (Sample, bool) {
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	if len(s.buf) == 0 {
		return Sample{}, false
	}
	smp := s.buf[0]
	s.buf[0] = Sample{} // the caller owns it now
	s.buf = s.buf[1:]
	return smp, true
}

// Samples returns an iterator over samples. It stops without error after
// MaxSamples samples, and otherwise ends by yielding one error (see Next),
// such as ctx's error when ctx ends. Breaking out of the loop leaves the
// Sampler usable.
func (s *Sampler) Samples(ctx context.Context) iter.Seq2[Sample, error] {
	return samplesOf(ctx, s.Next)
}

// Batches returns an iterator over batches of n samples whose columns are
// stacked along a new leading axis (see Batch). Every sample of a batch must
// have the same number of columns with the same dtypes and shapes;
// otherwise the iterator yields an error wrapping ErrInvalidArgument and
// stops. When the samples run out (MaxSamples reached, a terminal error
// such as a rate limiter timeout, or ctx ending), the samples gathered so
// far are yielded as a final, smaller batch, followed by the error if there
// is one. n must be positive; memory is taken as samples arrive, so n may
// be far larger than the samples that come (math.MaxInt gathers every
// sample into one batch).
func (s *Sampler) Batches(ctx context.Context, n int) iter.Seq2[Batch, error] {
	return batchesOf(ctx, n, s.Next)
}

// samplesOf iterates over the samples next returns until it reports io.EOF
// (a quiet end) or another error (yielded once). Sampler and PoolSampler
// share it.
func samplesOf(ctx context.Context, next func(context.Context) (Sample, error)) iter.Seq2[Sample, error] {
	return func(yield func(Sample, error) bool) {
		for {
			smp, err := next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(Sample{}, err)
				return
			}
			if !yield(smp, nil) {
				return
			}
		}
	}
}

// batchesFirstCap is the most samples the list a batch is gathered in has
// room for before any arrives; it grows as they come. A batch size much
// larger than the samples that ever arrive (Batches(ctx, math.MaxInt) to
// take all of them at once) so costs no memory up front.
const batchesFirstCap = 256

// batchesOf stacks the samples next returns into batches of n; see
// Sampler.Batches. Sampler and PoolSampler share it.
func batchesOf(ctx context.Context, n int, next func(context.Context) (Sample, error)) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		if n <= 0 {
			yield(Batch{}, fmt.Errorf("%w: Batches: batch size %d <= 0", ErrInvalidArgument, n))
			return
		}
		room := min(n, batchesFirstCap)
		for {
			samples := make([]Sample, 0, room)
			var err error
			for len(samples) < n {
				var smp Sample
				if smp, err = next(ctx); err != nil {
					break
				}
				samples = append(samples, smp)
			}
			room = max(room, len(samples)) // a full batch came: room for the next
			if len(samples) > 0 {
				b, berr := stackSamples(samples)
				if berr != nil {
					yield(Batch{}, berr)
					return
				}
				if !yield(b, nil) {
					return
				}
			}
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(Batch{}, err)
				return
			}
		}
	}
}

// stackSamples stacks the columns of samples into one Batch.
func stackSamples(samples []Sample) (Batch, error) {
	b := Batch{Infos: make([]SampleInfo, len(samples))}
	ncols := len(samples[0].Columns)
	for i, smp := range samples {
		b.Infos[i] = smp.Info
		if len(smp.Columns) != ncols {
			return Batch{}, fmt.Errorf("%w: Batches: sample %d (key %d) has %d columns, sample 0 has %d",
				ErrInvalidArgument, i, smp.Info.Key, len(smp.Columns), ncols)
		}
	}
	b.Columns = make([]Tensor, ncols)
	col := make([]Tensor, len(samples))
	for c := range ncols {
		for i, smp := range samples {
			col[i] = smp.Columns[c]
		}
		t, err := Stack(col)
		if err != nil {
			return Batch{}, fmt.Errorf("%w: Batches: column %d: %v", ErrInvalidArgument, c, err)
		}
		b.Columns[c] = t
	}
	return b, nil
}

// Close stops the workers and waits for them to exit. Buffered samples are
// dropped. Close is idempotent and always returns nil.
func (s *Sampler) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
	})
	<-s.exited
	return nil
}

func (s *Sampler) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// endErr is what Next returns once every worker has exited and the
// buffered samples are gone.
func (s *Sampler) endErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.err
	case s.closed:
		return fmt.Errorf("%w: sampler", ErrClosed)
	default:
		return io.EOF
	}
}

// fail records the first terminal error and halts the workers: they send
// no new request, but deliver the samples they hold and those of the
// requests they have in flight, which drainGuard bounds.
func (s *Sampler) fail(err error) {
	s.mu.Lock()
	if s.err == nil && !s.closed {
		s.err = err
	}
	s.mu.Unlock()
	s.stop()
}

// reserve takes up to want samples of the MaxSamples budget for one
// request. When the budget is spent but other workers still have samples
// in flight, it waits: a failed stream gives its unfilled samples back. It
// returns 0 when the sampler is halted or every sample was delivered.
func (s *Sampler) reserve(want int64) int64 {
	for {
		s.mu.Lock()
		if s.halt.Err() != nil || s.delivered >= s.maxSamples {
			s.mu.Unlock()
			return 0
		}
		if n := min(want, s.maxSamples-s.requested); n > 0 {
			s.requested += n
			s.mu.Unlock()
			return n
		}
		wait := s.budget
		s.mu.Unlock()
		select {
		case <-wait:
		case <-s.halt.Done():
			return 0
		}
	}
}

// release gives back n reserved samples that will not be delivered.
func (s *Sampler) release(n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.requested -= n
	close(s.budget)
	s.budget = make(chan struct{})
	s.mu.Unlock()
}

// deliver pushes decoded samples to the caller, waiting for room however
// long it takes: only Close makes it give up (and report false). The
// caller hands batch over and must not use it afterwards.
func (s *Sampler) deliver(batch []Sample) bool {
	if len(batch) == 0 {
		return true
	}
	select {
	case s.out <- batch:
	case <-s.ctx.Done():
		return false
	}
	s.mu.Lock()
	s.delivered += int64(len(batch))
	done := s.delivered >= s.maxSamples
	if done {
		// Wake workers waiting for budget so that they exit.
		close(s.budget)
		s.budget = make(chan struct{})
	}
	s.mu.Unlock()
	return true
}

// runWorker runs streams one after the other until the budget is spent,
// the sampler is halted, or a stream fails with a terminal error.
// Transient failures reopen the stream after an exponential backoff.
func (s *Sampler) runWorker(id int) {
	defer s.wg.Done()
	backoff := minRetryBackoff
	for {
		delivered, err := s.stream()
		if s.halt.Err() != nil {
			return
		}
		if err == nil {
			if delivered == 0 {
				return // budget spent
			}
			backoff = minRetryBackoff
			continue
		}
		if !retryable(err) {
			s.fail(err)
			return
		}
		if s.c.conn.GetState() == connectivity.Shutdown {
			s.fail(fmt.Errorf("%w: sampler: client connection closed: %v", ErrClosed, err))
			return
		}
		if delivered > 0 {
			backoff = minRetryBackoff
		}
		s.log.Warn("reverie sampler: sample stream failed; reopening",
			"table", s.table, "worker", id, "backoff", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.halt.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// stream opens one SampleStream and requests samples on it, one request at
// a time, until MaxSamplesPerStream samples were delivered, the budget is
// spent or the sampler is halted. It returns how many samples it
// delivered; the stream is cancelled on return.
func (s *Sampler) stream() (delivered int64, err error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	g := &drainGuard{cancel: cancel}
	defer context.AfterFunc(s.halt, g.halted)()
	var st reverbpb.ReverbService_SampleStreamClient
	for delivered < s.perStream {
		n := s.reserve(min(s.inFlight, s.perStream-delivered))
		if n == 0 {
			return delivered, nil
		}
		if st == nil {
			if st, err = s.c.rpc.SampleStream(ctx, grpc.ForceCodecV2(streamCodec{})); err != nil {
				s.release(n)
				return delivered, fromRPC(s.ctx, err)
			}
		}
		got, err := s.request(st, n, g)
		delivered += got
		if err != nil {
			s.release(n - got)
			return delivered, err
		}
	}
	return delivered, nil
}

// request sends one request for n samples and reads, decodes and delivers
// exactly n samples. g bounds the waits for responses once the sampler is
// halted.
func (s *Sampler) request(st reverbpb.ReverbService_SampleStreamClient, n int64, g *drainGuard) (got int64, err error) {
	req := &reverbpb.SampleStreamRequest{Table: s.table, NumSamples: n, RateLimiterTimeout: s.timeout}
	if err := st.Send(req); err != nil {
		if isEOF(err) { // the stream failed; Recv has the status
			g.receiving(true)
			err = st.RecvMsg(&sampleResponse{})
			g.receiving(false)
			if err == nil {
				// Every response to the requests before this one was
				// read: the server sent samples no one asked for.
				err = &Error{Sentinel: ErrServer, Code: codes.Internal,
					Msg: "sampler: the server sent more samples than were requested, then ended the stream"}
			}
		}
		return 0, s.streamErr(err)
	}
	var pending *partialSample
	defer func() {
		if pending != nil {
			pending.release()
		}
	}()
	resp := sampleResponse{table: s.table}
	for got < n {
		g.receiving(true)
		err := st.RecvMsg(&resp)
		g.receiving(false)
		if err != nil {
			return got, s.streamErr(err)
		}
		got, pending, err = s.deliverEntries(&resp, n, got, pending)
		resp.buf.Free()
		resp.recycle(pending != nil) // a pending sample still points into it
		if err != nil {
			return got, err
		}
	}
	if pending != nil {
		return got, fmt.Errorf("%w: sampler: server sent part of a sample beyond the %d requested", ErrServer, n)
	}
	return got, nil
}

// deliverEntries adds the entries of resp to the pending sample, and
// decodes every sample they complete, delivering them together once resp
// is read (or before an error). got counts the samples of the request
// delivered so far, of n; the new count and pending sample are returned.
func (s *Sampler) deliverEntries(resp *sampleResponse, n, got int64, pending *partialSample) (int64, *partialSample, error) {
	var batch []Sample
	fail := func(err error) (int64, *partialSample, error) {
		if !s.deliver(batch) {
			return got, pending, s.ctx.Err()
		}
		return got + int64(len(batch)), pending, err
	}
	var holder *partialSample // the sample holding a reference to resp.buf
	for i := range resp.entries {
		e := &resp.entries[i]
		if got+int64(len(batch)) == n {
			return fail(fmt.Errorf("%w: sampler: server sent more than the %d samples requested", ErrServer, n))
		}
		if pending == nil {
			if e.info == nil {
				return fail(fmt.Errorf("%w: table %q: first entry of a sample has no info", ErrMalformedSample, s.table))
			}
			pending = resp.spare
			if pending == nil {
				pending = &partialSample{}
			}
			resp.spare = nil
			pending.info = e.info
		}
		if len(e.chunks) > 0 {
			if holder != pending {
				pending.hold(resp.buf)
				holder = pending
			}
			for j := range e.chunks {
				pending.add(&e.chunks[j])
			}
		}
		if !e.end {
			continue
		}
		smp, err := pending.decode()
		pending.release()
		resp.spare, pending, holder = pending, nil, nil
		if err != nil {
			return fail(err)
		}
		if batch == nil {
			batch = make([]Sample, 0, min(len(resp.entries)-i, int(n-got)))
		}
		batch = append(batch, smp)
	}
	if !s.deliver(batch) {
		return got, pending, s.ctx.Err()
	}
	return got + int64(len(batch)), pending, nil
}

// drainGuard bounds a stream's waits for responses once the sampler is
// halted by a terminal error: a wait for a response that lasts
// drainRecvTimeout cancels the stream. Until then a request in flight is
// read to its end, so that no sample the server sent for it is lost; what
// a wait can lose is a sample the server sends as the stream is
// cancelled. Time a worker spends waiting for room to deliver does not
// count: the server may have sent the rest of the request meanwhile, and
// the samples wait in the stream's flow-control window.
type drainGuard struct {
	cancel context.CancelFunc // the stream's

	mu     sync.Mutex
	halt   bool        // the sampler is halted
	inRecv bool        // the worker waits for a response
	timer  *time.Timer // cancels the stream; set while halt && inRecv
}

// halted is called once the sampler is halted.
func (g *drainGuard) halted() {
	g.mu.Lock()
	g.halt = true
	g.update()
	g.mu.Unlock()
}

// receiving is called with true before the worker waits for a response,
// and with false once the wait ends.
func (g *drainGuard) receiving(on bool) {
	g.mu.Lock()
	g.inRecv = on
	g.update()
	g.mu.Unlock()
}

func (g *drainGuard) update() {
	switch {
	case g.halt && g.inRecv && g.timer == nil:
		g.timer = time.AfterFunc(drainRecvTimeout, g.cancel)
	case !g.inRecv && g.timer != nil:
		g.timer.Stop()
		g.timer = nil
	}
}

// streamErr maps a stream failure. A stream that ends cleanly in the middle
// of a request was ended by the server (for example while shutting down),
// so it counts as transient.
func (s *Sampler) streamErr(err error) error {
	if isEOF(err) {
		return fmt.Errorf("%w: sampler: stream ended before the request was served", ErrUnavailable)
	}
	return fromRPC(s.ctx, err)
}

// partialSample collects the entries of one sample.
type partialSample struct {
	info   *sampleInfo
	chunks []*sampleChunk // by arrival; a later chunk replaces an earlier one of the same key
	byKey  map[uint64]*sampleChunk
	bufs   []mem.Buffer // references to the buffers the chunks' contents are in
	out    outSlab      // kept across samples: see outSlab
}

// outSlab hands out the small parts of the Samples a partialSample builds,
// their column lists and shapes, from arrays shared by a few samples in
// turn: one allocation for several samples instead of two per sample. A
// part is never handed out twice, and each has no spare capacity, so an
// append to it copies. A Sample the caller keeps keeps its arrays too,
// which outSlabCols and outSlabDims bound (about 1.3 kB and 0.5 kB).
type outSlab struct {
	cols []Tensor
	dims []int64
}

const (
	outSlabCols = 16
	outSlabDims = 64
)

// columns returns a zeroed list of n columns.
func (o *outSlab) columns(n int) []Tensor {
	if n > outSlabCols/2 {
		return make([]Tensor, n)
	}
	if cap(o.cols)-len(o.cols) < n {
		o.cols = make([]Tensor, 0, outSlabCols)
	}
	i := len(o.cols)
	o.cols = o.cols[:i+n]
	return o.cols[i : i+n : i+n]
}

// shape returns a copy of shape, nil if it is empty (as cloneShape).
func (o *outSlab) shape(shape []int64) []int64 {
	n := len(shape)
	switch {
	case n == 0:
		return nil
	case n > outSlabDims/4:
		return cloneShape(shape)
	}
	if cap(o.dims)-len(o.dims) < n {
		o.dims = make([]int64, 0, outSlabDims)
	}
	i := len(o.dims)
	o.dims = append(o.dims, shape...)
	return o.dims[i : i+n : i+n]
}

// partialSampleMapFrom is the number of chunks from which a partial sample
// indexes them in a map rather than searching its list.
const partialSampleMapFrom = 16

func (p *partialSample) add(c *sampleChunk) {
	if p.byKey != nil {
		p.byKey[c.key] = c
		return
	}
	for i, old := range p.chunks {
		if old.key == c.key {
			p.chunks[i] = c
			return
		}
	}
	p.chunks = append(p.chunks, c)
	if len(p.chunks) >= partialSampleMapFrom {
		p.byKey = make(map[uint64]*sampleChunk, 2*len(p.chunks))
		for _, c := range p.chunks {
			p.byKey[c.key] = c
		}
		p.chunks = nil
	}
}

func (p *partialSample) chunk(key uint64) *sampleChunk {
	if p.byKey != nil {
		return p.byKey[key]
	}
	for _, c := range p.chunks {
		if c.key == key {
			return c
		}
	}
	return nil
}

// hold takes a reference to buf, which chunks of the sample point into.
func (p *partialSample) hold(buf mem.Buffer) {
	if buf == nil {
		return
	}
	buf.Ref()
	p.bufs = append(p.bufs, buf)
}

// release drops the sample's buffer references; its chunks must not be
// read afterwards.
func (p *partialSample) release() {
	for _, b := range p.bufs {
		b.Free()
	}
	clear(p.bufs)
	clear(p.chunks)
	p.info, p.bufs, p.chunks, p.byKey = nil, p.bufs[:0], p.chunks[:0], nil
}

// decodeChunk decodes the tensors of a chunk once, as DecodeChunk does,
// into their t, and returns them.
func decodeChunk(c *sampleChunk) ([]wireTensor, error) {
	protos := c.tensors
	if len(protos) == 0 {
		protos = c.deprecated
	}
	if c.decoded {
		return protos, nil
	}
	for i := range protos {
		w := &protos[i]
		var err error
		if w.pb != nil {
			w.t, err = DecodeTensor(w.pb, c.delta)
		} else {
			w.t, err = decodeTensor(w.dtype, w.dims, w.unknownRank, w.content, nil, c.delta)
		}
		if err != nil {
			return nil, fmt.Errorf("client: chunk %d tensor %d: %w", c.key, i, err)
		}
	}
	c.decoded = true
	return protos, nil
}

// decode builds the sample's columns from its chunks. Chunks are decoded
// at most once per sample.
func (p *partialSample) decode() (Sample, error) {
	item := &p.info.item
	smp := Sample{Info: SampleInfo{
		Key:          item.key,
		Table:        item.table,
		Priority:     item.priority,
		Probability:  p.info.probability,
		TableSize:    p.info.tableSize,
		TimesSampled: item.timesSampled,
		RateLimited:  p.info.rateLimited,
	}}
	if item.hasInserted {
		smp.Info.InsertedAt = time.Unix(item.seconds, int64(item.nanos)).UTC()
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: table %q, item %d: %s", ErrMalformedSample, item.table, item.key, fmt.Sprintf(format, args...))
	}
	cols := item.columns
	if len(cols) == 0 {
		return Sample{}, bad("no trajectory columns")
	}
	smp.Columns = p.out.columns(len(cols))
	for ci := range cols {
		t, err := p.column(&cols[ci], ci, bad)
		if err != nil {
			return Sample{}, err
		}
		smp.Columns[ci] = t
	}
	return smp, nil
}

// column builds column ci of the sample from its chunk slices.
func (p *partialSample) column(col *sampleColumn, ci int, bad func(string, ...any) error) (Tensor, error) {
	slices := col.slices
	if len(slices) == 0 {
		return Tensor{}, bad("column %d has no chunk slices", ci)
	}
	var t Tensor
	var parts []Tensor
	whole := false // the column is one whole chunk tensor: no copy needed
	for si, cs := range slices {
		chunk := p.chunk(cs.key)
		if chunk == nil {
			return Tensor{}, bad("column %d references chunk %d, which the sample does not contain", ci, cs.key)
		}
		tensors, err := decodeChunk(chunk)
		if err != nil {
			return Tensor{}, bad("%v", err)
		}
		idx := cs.index
		if idx < 0 || int(idx) >= len(tensors) {
			return Tensor{}, bad("column %d: chunk %d has %d tensors, slice wants index %d", ci, cs.key, len(tensors), idx)
		}
		src := tensors[idx].t // its Shape may be in the response's slabs: not kept
		from, length := int64(cs.offset), int64(cs.length)
		if len(slices) == 1 && from == 0 && len(src.Shape) > 0 && length == src.Shape[0] {
			// src is valid (decodeTensor made it): share its elements.
			t = Tensor{DType: src.DType, Data: src.Data, Strings: src.Strings}
			if col.squeeze && length == 1 {
				t.Shape = p.out.shape(src.Shape[1:])
				return t, nil
			}
			t.Shape = p.out.shape(src.Shape)
			whole = true
			break
		}
		part, err := Slice(src, from, from+length)
		if err != nil {
			return Tensor{}, bad("column %d, chunk %d: %v", ci, cs.key, err)
		}
		if parts == nil {
			parts = make([]Tensor, len(slices))
		}
		parts[si] = part
	}
	if !whole {
		var err error
		if t, err = Concat(parts); err != nil {
			return Tensor{}, bad("column %d: %v", ci, err)
		}
	}
	if col.squeeze {
		var err error
		if t, err = Squeeze0(t); err != nil {
			return Tensor{}, bad("column %d: squeeze: %v", ci, err)
		}
	}
	return t, nil
}
