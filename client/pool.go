package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// DefaultFailoverDelay is PoolOptions.FailoverDelay when it is zero.
const DefaultFailoverDelay = 2 * time.Second

// PoolOptions configures a Pool.
type PoolOptions struct {
	// Logger receives the pool's logs: a server's connection lost
	// (warning) or back (info), a writer moving to another server
	// (warning), a server's sampler ending (warning). Writers and samplers
	// made from the pool log here too unless their options name a Logger.
	// Nil means slog.Default().
	Logger *slog.Logger
	// FailoverDelay is how long a server's connection must have been down
	// (not READY) before the pool gives up on it for now: PoolWriters move
	// to another server, and a PoolSampler with MaxSamples hands the
	// server's unfilled share of samples to the others. Shorter delays
	// react faster but move writers on brief network hiccups. Zero means
	// DefaultFailoverDelay.
	FailoverDelay time.Duration
}

// Pool is a set of servers used as one replay buffer: writers are spread
// over the servers, samples are requested from all of them in parallel and
// merged into one stream, and when a server dies sampling goes on from the
// others while its writers move.
//
// A Pool holds one Client per address given to DialPool. A single
// "dns:///name:port" address is one Client whose gRPC channel already
// balances round-robin over every address the name resolves to (as
// Reverb's Python client does): each stream (a writer's insert stream, a
// sampler worker's sample stream) goes to the next ready backend, and a
// writer or sampler whose backend dies reopens its stream on another one
// by itself. With such a pool, give samplers at least as many NumWorkers as
// there are backends so that every backend is sampled at once.
//
// The servers are independent: an item lives on the one server its writer
// sent it to, and the tables must have the same names (and should have the
// same configuration) on every server.
//
// A Pool is safe for concurrent use. Close it after closing its writers and
// samplers.
type Pool struct {
	members []*poolMember
	log     *slog.Logger
	delay   time.Duration

	ctx    context.Context // ends on Close; stops the watchers
	cancel context.CancelFunc
	wg     sync.WaitGroup // the watchers

	mu      sync.Mutex // guards the fields below
	changed chan struct{}
	next    int // member the next writer starts looking from
	closed  bool
}

// poolMember is one server of a pool and the health of its connection.
type poolMember struct {
	c *Client

	mu      sync.Mutex // guards the fields below
	up      bool       // the connection is READY
	since   time.Time  // when up last changed
	lost    bool       // a warning was logged since the last READY
	changed chan struct{}
}

// DialPool connects to every address (see Dial for their forms) in
// parallel and waits until each connection is ready. A pool starts
// complete: if any server is not reachable before ctx ends, DialPool closes
// the connections it made and returns an error (wrapping ErrUnavailable)
// that names each unreachable address. Once dialled, a server that goes
// down stays in the pool: its connection reconnects in the background and
// writers and samplers use it again when it is back. A server is down when
// its connection is not ready; one that goes silent without closing its
// connections is noticed by keepalive pings (DefaultKeepaliveTime).
//
// The pool does not rebalance: a writer that moved away from a server
// stays where it went when that server comes back (new writers start on
// it again, round robin), and a PoolSampler draws from each server as
// fast as it answers, not in proportion to what each server holds. A
// server back from an outage with few items has them sampled more often
// than the others' until writers fill it again.
//
// opts apply to every connection, except that the pool's connections never
// go idle (a grpc.WithIdleTimeout among them is overridden): the pool reads
// a connection that is not ready as a server that is down, and gRPC-Go
// lets a connection with no call open go idle after 30 minutes, so a
// server that only some writers use was reported lost and found again
// every half hour, and skipped by new writers meanwhile.
func DialPool(ctx context.Context, addrs []string, popts PoolOptions, opts ...Option) (*Pool, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: DialPool: no addresses", ErrInvalidArgument)
	}
	if popts.FailoverDelay < 0 {
		return nil, fmt.Errorf("%w: DialPool: FailoverDelay %v < 0", ErrInvalidArgument, popts.FailoverDelay)
	}
	clients := make([]*Client, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	// Built once, on a clipped copy: appending to the caller's slice from
	// each goroutine wrote into its spare capacity from all of them.
	opts = append(slices.Clip(opts), WithDialOptions(grpc.WithIdleTimeout(0)))
	for i, addr := range addrs {
		wg.Go(func() { clients[i], errs[i] = Dial(ctx, addr, opts...) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
		return nil, fmt.Errorf("DialPool: %w", err)
	}

	p := &Pool{log: popts.Logger, delay: popts.FailoverDelay, changed: make(chan struct{})}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.delay == 0 {
		p.delay = DefaultFailoverDelay
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	now := time.Now()
	for _, c := range clients {
		m := &poolMember{c: c, up: true, since: now, changed: make(chan struct{})}
		p.members = append(p.members, m)
		p.wg.Add(1)
		go p.watch(m)
	}
	return p, nil
}

// Clients returns the pool's clients, one per address, in the order given
// to DialPool. They are closed by Pool.Close.
func (p *Pool) Clients() []*Client {
	out := make([]*Client, len(p.members))
	for i, m := range p.members {
		out[i] = m.c
	}
	return out
}

// Close stops watching the servers and closes every client; writers and
// samplers made from the pool fail afterwards (close them first). Close is
// idempotent and returns the first error from closing a connection.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	var first error
	for _, m := range p.members {
		if err := m.c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// watch follows a member's connectivity state until the pool is closed. An
// IDLE connection is asked to connect, so that a server that comes back
// is noticed without waiting for an RPC.
func (p *Pool) watch(m *poolMember) {
	defer p.wg.Done()
	conn := m.c.conn
	for {
		s := conn.GetState()
		p.setUp(m, s == connectivity.Ready)
		if s == connectivity.Idle {
			conn.Connect()
		}
		if !conn.WaitForStateChange(p.ctx, s) {
			return
		}
	}
}

// setUp records a member's health, logs changes and wakes waiters.
func (p *Pool) setUp(m *poolMember, up bool) {
	m.mu.Lock()
	if m.up == up {
		m.mu.Unlock()
		return
	}
	m.up = up
	m.since = time.Now()
	close(m.changed)
	m.changed = make(chan struct{})
	logLost, logBack := !up && !m.lost, up && m.lost
	if logLost {
		m.lost = true
	}
	if up {
		m.lost = false
	}
	m.mu.Unlock()

	if logLost && p.ctx.Err() == nil {
		p.log.Warn("reverie pool: connection to a server lost; using the others", "addr", m.c.addr, "failover_delay", p.delay)
	}
	if logBack {
		p.log.Info("reverie pool: connection to a server is back", "addr", m.c.addr)
	}
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// state returns whether the member is up, whether it has been down for at
// least the failover delay, and a channel closed at its next change.
func (p *Pool) state(m *poolMember) (up, failed bool, changed <-chan struct{}, left time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.up {
		return true, false, m.changed, 0
	}
	left = p.delay - time.Since(m.since)
	return false, left <= 0, m.changed, left
}

// failed reports whether the member has been down for the failover delay.
func (p *Pool) failed(m *poolMember) bool {
	_, f, _, _ := p.state(m)
	return f
}

// errServerFailed is the cause of a context cancelled by whileUp.
var errServerFailed = errors.New("client: pool: server down for longer than the failover delay")

// whileUp returns a context derived from ctx that is cancelled once m has
// been down for the failover delay, and a stop function that must be
// called when the context is no longer needed; stop reports whether the
// context was cancelled for that reason.
func (p *Pool) whileUp(ctx context.Context, m *poolMember) (context.Context, func() bool) {
	wctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			_, failed, changed, left := p.state(m)
			if failed {
				cancel(errServerFailed)
				return
			}
			var timeout <-chan time.Time
			var t *time.Timer
			if left > 0 {
				t = time.NewTimer(left)
				timeout = t.C
			}
			select {
			case <-changed:
			case <-timeout:
			case <-stop:
			case <-wctx.Done():
			}
			if t != nil {
				t.Stop()
			}
			select {
			case <-stop:
				return
			case <-wctx.Done():
				return
			default:
			}
		}
	}()
	return wctx, func() bool {
		close(stop)
		<-exited
		failed := errors.Is(context.Cause(wctx), errServerFailed)
		cancel(nil)
		return failed
	}
}

// pick returns the first member that is up, looking from the one after
// prev (or from the round-robin position when prev < 0) and wrapping
// around; prev itself is looked at last. When none is up, ok is false and
// the member returned is prev (or the round-robin position).
func (p *Pool) pick(prev int) (int, bool) {
	n := len(p.members)
	start := prev + 1
	if prev < 0 {
		p.mu.Lock()
		start = p.next
		p.next = (p.next + 1) % n
		p.mu.Unlock()
	}
	for k := range n {
		i := (start + k) % n
		if up, _, _, _ := p.state(p.members[i]); up {
			return i, true
		}
	}
	if prev >= 0 {
		return prev, false
	}
	return start % n, false
}

// changes returns the channel that the next change of any member's health
// closes. Take it before looking at the members, so that a change between
// the look and the wait is not missed.
func (p *Pool) changes() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// waitChange waits until changed (from changes) is closed, or returns an
// error when ctx ends, done is closed or the pool is closed.
func (p *Pool) waitChange(ctx context.Context, changed <-chan struct{}, done <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return ErrClosed
	case <-p.ctx.Done():
		return fmt.Errorf("%w: pool", ErrClosed)
	}
}

// PoolWriter writes trajectories to one server of a pool at a time, and
// moves to another server when its server is down for longer than the
// pool's FailoverDelay. It has TrajectoryWriter's methods; items are built
// from PoolWriter.History, whose references survive a move.
//
// A PoolWriter wraps a TrajectoryWriter on its current server and keeps,
// on the side, a copy of the steps in the history window and of the steps
// referenced by pending items: the items created since the last Flush (or
// EndEpisode) that returned nil. When the server has been down for the
// failover delay, a blocked Flush, EndEpisode or CreateItem (and any
// CreateItem once the delay has passed) moves the writer: it closes the
// old TrajectoryWriter, opens one on the next server that is up (waiting
// for one if none is), appends the kept steps there in order and creates
// every pending item again, then carries on. So:
//
//   - every item created before a Flush (or EndEpisode) that returned nil
//     has been confirmed by some server of the pool;
//   - delivery is at least once: a pending item that the old server had
//     already applied is re-created all the same, so if that server comes
//     back with its data the item is on both (under different keys);
//   - a server that dies loses the items it held, as any server does;
//   - re-created items have the same columns, table and priority, but new
//     keys, and their steps get a new episode id on the new server; steps
//     that no pending item referenced and that had left the history are
//     not sent again.
//
// To bound the kept steps, CreateItem first flushes when
// MaxInFlightItems items are pending, so a PoolWriter waits for the
// server's confirmations every MaxInFlightItems items (a TrajectoryWriter
// only waits for a free slot). Steps are copied twice, once here and once
// by the TrajectoryWriter.
//
// A PoolWriter is safe for concurrent use; its calls run one at a time.
type PoolWriter struct {
	pool       *Pool
	opts       WriterOptions // Logger and MaxInFlightItems defaulted
	keepAlive  int
	maxPending int

	sem  chan struct{} // holds a token while a call runs
	done chan struct{} // closed by Close

	// mu guards the fields below. Except for closed, they change only
	// while sem is held too, so a call may read them without mu.
	mu     sync.Mutex
	closed bool
	member int               // index of the current server
	cur    *TrajectoryWriter // writer on the current server
	steps  map[int64]*poolStep
	next   int64 // number of the next step (never reset)
	// histLen is the number of steps in the history window, the steps
	// [next-histLen, next).
	histLen      int
	episodeSteps int
	appended     int64 // steps appended to cur
	pending      []*poolItem
	columns      map[string]bool // columns ever appended
}

// poolStep is a step the writer keeps.
type poolStep struct {
	data map[string]Tensor
	refs int   // pending items referencing it
	pos  int64 // its position among the steps appended to cur
}

// poolItem is a pending item.
type poolItem struct {
	table    string
	priority float64
	cols     []PoolTrajectoryColumn
}

// maxStep returns the newest step the item references.
func (it *poolItem) maxStep() int64 {
	m := int64(-1)
	for _, c := range it.cols {
		m = max(m, c.to-1)
	}
	return m
}

// NewTrajectoryWriter returns a writer on the next server that is up,
// round-robin over the pool (or the next server when none is up); see
// PoolWriter. opts are those of Client.NewTrajectoryWriter; a nil Logger
// means the pool's.
func (p *Pool) NewTrajectoryWriter(ctx context.Context, opts WriterOptions) (*PoolWriter, error) {
	if opts.Logger == nil {
		opts.Logger = p.log
	}
	if opts.MaxInFlightItems == 0 {
		opts.MaxInFlightItems = DefaultMaxInFlightItems
	}
	i, _ := p.pick(-1)
	tw, err := p.members[i].c.NewTrajectoryWriter(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &PoolWriter{
		pool:       p,
		opts:       opts,
		keepAlive:  opts.NumKeepAliveRefs,
		maxPending: opts.MaxInFlightItems,
		sem:        make(chan struct{}, 1),
		done:       make(chan struct{}),
		member:     i,
		cur:        tw,
		steps:      make(map[int64]*poolStep),
		columns:    make(map[string]bool),
	}, nil
}

// Addr returns the address of the writer's current server.
func (w *PoolWriter) Addr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pool.members[w.member].c.addr
}

// acquire waits for the writer's previous call to return.
func (w *PoolWriter) acquire(ctx context.Context) error {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return ErrClosed
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		<-w.sem
		return ErrClosed
	}
	return nil
}

func (w *PoolWriter) release() { <-w.sem }

// Append adds one step; see TrajectoryWriter.Append.
func (w *PoolWriter) Append(ctx context.Context, step map[string]Tensor) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.acquire(ctx); err != nil {
		return err
	}
	defer w.release()
	if err := w.cur.Append(ctx, step); err != nil {
		return w.serverErr(err)
	}
	data := make(map[string]Tensor, len(step))
	for name, t := range step {
		data[name] = t.Clone()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range data {
		w.columns[name] = true
	}
	w.steps[w.next] = &poolStep{data: data, pos: w.appended}
	w.next++
	w.appended++
	w.episodeSteps++
	if w.histLen < w.keepAlive {
		w.histLen++
	} else if old := w.steps[w.next-1-int64(w.keepAlive)]; old != nil && old.refs == 0 {
		delete(w.steps, w.next-1-int64(w.keepAlive))
	}
	return nil
}

// EpisodeSteps returns the number of steps appended since the writer was
// created or the last EndEpisode.
func (w *PoolWriter) EpisodeSteps() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.episodeSteps
}

// CreateItem creates an item in table from columns of this writer's
// History; see TrajectoryWriter.CreateItem. When MaxInFlightItems items
// are pending it first flushes (see Flush), and when the writer's server
// has been down for the failover delay it first moves to another server.
func (w *PoolWriter) CreateItem(ctx context.Context, table string, priority float64, trajectory []PoolTrajectoryColumn) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(trajectory) == 0 {
		return fmt.Errorf("%w: CreateItem: empty trajectory", ErrInvalidArgument)
	}
	for i, tc := range trajectory {
		if err := tc.Err(); err != nil {
			return fmt.Errorf("CreateItem: trajectory column %d: %w", i, err)
		}
		if tc.w != w {
			return fmt.Errorf("%w: CreateItem: trajectory column %d comes from another writer", ErrInvalidArgument, i)
		}
	}
	if err := w.acquire(ctx); err != nil {
		return err
	}
	defer w.release()
	if len(w.pending) >= w.maxPending {
		if err := w.flushLocked(ctx, func(ctx context.Context, tw *TrajectoryWriter) error { return tw.Flush(ctx) }); err != nil {
			return err
		}
		w.confirmed(false, false)
	}
	w.mu.Lock()
	low := w.next - int64(w.histLen)
	w.mu.Unlock()
	for i, tc := range trajectory {
		if tc.from < low {
			return fmt.Errorf("%w: CreateItem: trajectory column %d references a step of column %q that is no longer in the history",
				ErrInvalidArgument, i, tc.name)
		}
	}
	if w.pool.failed(w.pool.members[w.member]) {
		if err := w.move(ctx); err != nil {
			return err
		}
	}
	it := &poolItem{table: table, priority: priority, cols: append([]PoolTrajectoryColumn(nil), trajectory...)}
	if err := w.create(ctx, w.cur, it, w.appended, func(s int64) int64 { return w.steps[s].pos }); err != nil {
		return w.serverErr(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(w.pending, it)
	for _, tc := range it.cols {
		for s := tc.from; s < tc.to; s++ {
			w.steps[s].refs++
		}
	}
	return nil
}

// create creates it on tw, whose latest appended step is at position
// appended-1; pos maps a step number to its position on tw.
func (w *PoolWriter) create(ctx context.Context, tw *TrajectoryWriter, it *poolItem, appended int64, pos func(int64) int64) error {
	cols := make([]TrajectoryColumn, len(it.cols))
	for i, tc := range it.cols {
		first, last := pos(tc.from), pos(tc.to-1)
		if last-first != tc.to-1-tc.from {
			// Cannot happen: kept steps are appended in order, and every
			// step an item references is kept.
			return fmt.Errorf("%w: CreateItem: internal error: steps [%d, %d) are not contiguous on the writer", ErrServer, tc.from, tc.to)
		}
		h := tw.History(tc.name)
		n := h.Len()
		col := h.Slice(n-int(appended-first), n-int(appended-last)+1)
		if tc.squeeze {
			col = col.Squeeze()
		}
		cols[i] = col
	}
	return tw.CreateItem(ctx, it.table, it.priority, cols)
}

// Flush waits until every item created so far is confirmed; see
// TrajectoryWriter.Flush. If the writer's server is down for the failover
// delay meanwhile, the writer moves and Flush waits for the new server's
// confirmations. It returns ctx.Err() if ctx ends first (the items stay
// pending).
func (w *PoolWriter) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.acquire(ctx); err != nil {
		return err
	}
	defer w.release()
	if err := w.flushLocked(ctx, func(ctx context.Context, tw *TrajectoryWriter) error { return tw.Flush(ctx) }); err != nil {
		return err
	}
	w.confirmed(false, false)
	return nil
}

// EndEpisode flushes (see Flush) and starts a new episode; see
// TrajectoryWriter.EndEpisode.
func (w *PoolWriter) EndEpisode(ctx context.Context, clearBuffers bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.acquire(ctx); err != nil {
		return err
	}
	defer w.release()
	if err := w.flushLocked(ctx, func(ctx context.Context, tw *TrajectoryWriter) error { return tw.EndEpisode(ctx, clearBuffers) }); err != nil {
		return err
	}
	w.confirmed(true, clearBuffers)
	return nil
}

// confirmed forgets the pending items after a successful flush and drops
// the steps only they kept; after an EndEpisode, it starts a new episode,
// and with clearBuffers also drops the history.
func (w *PoolWriter) confirmed(endEpisode, clearBuffers bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = nil
	low := w.next - int64(w.histLen)
	for s, st := range w.steps {
		st.refs = 0
		if s < low || clearBuffers {
			delete(w.steps, s)
		}
	}
	if clearBuffers {
		w.histLen = 0
	}
	if endEpisode {
		w.episodeSteps = 0
	}
}

// flushLocked runs op (a Flush or an EndEpisode) on the current writer and
// moves to another server whenever the current one has been down for the
// failover delay while op waits. It returns nil once op succeeds.
func (w *PoolWriter) flushLocked(ctx context.Context, op func(context.Context, *TrajectoryWriter) error) error {
	for {
		m := w.pool.members[w.member]
		wctx, stop := w.pool.whileUp(ctx, m)
		err := op(wctx, w.cur)
		failed := stop()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !failed {
			return w.serverErr(err)
		}
		if err := w.move(ctx); err != nil {
			return err
		}
	}
}

// serverErr names the current server in an error from its writer; the
// context's own errors stay as they are.
func (w *PoolWriter) serverErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("pool writer: %s: %w", w.pool.members[w.member].c.addr, err)
}

// move switches to the next server that is up, waiting for one if none
// is, and re-creates there the kept steps and the pending items. If the
// current server is the only one up, it stays.
func (w *PoolWriter) move(ctx context.Context) error {
	from := w.member
	var to int
	for {
		changed := w.pool.changes()
		var ok bool
		if to, ok = w.pool.pick(from); ok {
			break
		}
		if err := w.pool.waitChange(ctx, changed, w.done); err != nil {
			return err
		}
	}
	if to == from {
		return nil
	}
	old := w.pool.members[from].c.addr
	addr := w.pool.members[to].c.addr
	tw, err := w.pool.members[to].c.NewTrajectoryWriter(ctx, w.opts)
	if err != nil {
		return err
	}
	order := make([]int64, 0, len(w.steps))
	for s := range w.steps {
		order = append(order, s)
	}
	slices.Sort(order)
	pos := make(map[int64]int64, len(order))
	var appended int64
	j := 0
	appendUpTo := func(limit int64) error {
		for ; j < len(order) && order[j] <= limit; j++ {
			if err := tw.Append(ctx, w.steps[order[j]].data); err != nil {
				return err
			}
			pos[order[j]] = appended
			appended++
		}
		return nil
	}
	for _, it := range w.pending {
		if err = appendUpTo(it.maxStep()); err != nil {
			break
		}
		if err = w.create(ctx, tw, it, appended, func(s int64) int64 { return pos[s] }); err != nil {
			break
		}
	}
	if err == nil {
		err = appendUpTo(w.next)
	}
	if err != nil {
		tw.Close()
		return fmt.Errorf("moving writer from %s to %s: %w", old, addr, err)
	}

	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		tw.Close()
		return ErrClosed
	}
	prev := w.cur
	w.cur, w.member, w.appended = tw, to, appended
	for s, st := range w.steps {
		st.pos = pos[s]
	}
	w.mu.Unlock()
	prev.Close()
	w.pool.log.Warn("reverie pool: writer moved to another server; pending items re-created there",
		"from", old, "to", addr, "pending_items", len(w.pending), "steps_resent", len(order))
	return nil
}

// Close closes the writer's TrajectoryWriter; see TrajectoryWriter.Close.
// Pending items are dropped; Flush first to keep them. A call blocked in
// another goroutine returns ErrClosed. Close is idempotent and returns
// nil.
func (w *PoolWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.done)
	cur := w.cur
	w.mu.Unlock()
	cur.Close()
	w.sem <- struct{}{} // wait for a running call; never released
	w.mu.Lock()
	cur = w.cur
	w.pending = nil
	clear(w.steps)
	w.mu.Unlock()
	cur.Close()
	return nil
}

// History returns the history of the named column; see
// TrajectoryWriter.History. The column need not exist yet.
func (w *PoolWriter) History(column string) *PoolColumn {
	return &PoolColumn{w: w, name: column}
}

// PoolColumn is the history of one column of a PoolWriter, indexed as
// Column is: the column's values at the last NumKeepAliveRefs steps, 0 the
// oldest, negative indices counting from the end. It is a view of the
// writer's current history.
type PoolColumn struct {
	w    *PoolWriter
	name string
}

// Name returns the column's name.
func (c *PoolColumn) Name() string { return c.name }

// Len returns the number of steps in the history window, gaps included.
func (c *PoolColumn) Len() int {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.w.histLen
}

// At references the step at index i as a column of one row; see
// Column.At.
func (c *PoolColumn) At(i int) PoolTrajectoryColumn {
	return c.resolve(atBounds(c.name, i))
}

// Slice references the steps [from, to); see Column.Slice.
func (c *PoolColumn) Slice(from, to int) PoolTrajectoryColumn {
	return c.resolve(sliceBounds(c.name, from, to))
}

// Last references the latest n steps, oldest first; see Column.Last.
func (c *PoolColumn) Last(n int) PoolTrajectoryColumn {
	return c.resolve(lastBounds(c.name, n))
}

// resolve turns window indices into step numbers, checking for gaps.
func (c *PoolColumn) resolve(bounds historyBounds) PoolTrajectoryColumn {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	out := PoolTrajectoryColumn{w: w, name: c.name}
	if w.closed {
		out.err = ErrClosed
		return out
	}
	from, to, err := bounds(w.histLen)
	if err != nil {
		out.err = err
		return out
	}
	if !w.columns[c.name] {
		out.err = fmt.Errorf("unknown column %q", c.name)
		return out
	}
	low := w.next - int64(w.histLen)
	out.from, out.to = low+int64(from), low+int64(to)
	for s := out.from; s < out.to; s++ {
		if _, ok := w.steps[s].data[c.name]; !ok {
			out.err = fmt.Errorf("column %q has no value at history index %d (the step omitted it)", c.name, s-low)
			return out
		}
	}
	return out
}

// PoolTrajectoryColumn is one column of a PoolWriter's item: a range of
// steps of one column, made by a PoolColumn's At, Slice or Last. It is a
// value; its steps must still be in the history when CreateItem is called.
type PoolTrajectoryColumn struct {
	w        *PoolWriter
	name     string
	from, to int64 // step numbers
	squeeze  bool
	err      error
}

// Len returns the number of steps referenced.
func (t PoolTrajectoryColumn) Len() int { return int(t.to - t.from) }

// Squeezed reports whether the column drops its leading axis.
func (t PoolTrajectoryColumn) Squeezed() bool { return t.squeeze }

// Squeeze returns the column marked to drop its leading axis; it needs
// exactly one step.
func (t PoolTrajectoryColumn) Squeeze() PoolTrajectoryColumn {
	if t.err == nil && t.to-t.from != 1 {
		t.err = fmt.Errorf("cannot squeeze a column of %d steps", t.to-t.from)
	}
	t.squeeze = true
	return t
}

// Err returns the error recorded when the column was built, if any.
func (t PoolTrajectoryColumn) Err() error {
	if t.err == nil {
		if t.w == nil {
			return fmt.Errorf("%w: zero PoolTrajectoryColumn", ErrInvalidArgument)
		}
		return nil
	}
	if errors.Is(t.err, ErrClosed) {
		return t.err
	}
	return fmt.Errorf("%w: %v", ErrInvalidArgument, t.err)
}

// PoolSampler samples one table on every server of a pool at once and
// merges the samples into one stream. Each server has its own Sampler
// (with the options given to Pool.NewSampler, NumWorkers streams each), and
// samples are returned in the order they arrive, whatever their server.
//
// A server that goes down does not interrupt the stream: its Sampler
// reopens its streams with backoff (logging warnings) until the server is
// back, while the other servers keep the stream flowing. A server whose
// Sampler ends with a terminal error (an unknown table, a rate limiter
// timeout, a malformed sample) is dropped with a warning. The stream ends
// with an error only when every server's Sampler has ended: Next then
// returns the first such error, naming its server.
//
// MaxSamples counts samples across the pool and is enforced without
// over-sampling: the budget is handed to the servers in shares of at most
// NumWorkers × MaxInFlightSamplesPerWorker samples (and at most a fair
// split of MaxSamples), each fetched by a Sampler limited to its share, and
// a server gets a new share when it has delivered its last one. So the
// tables see at most MaxSamples samples in all, except that when a server
// has been down for the pool's FailoverDelay its unfilled share is given
// to the others (samples it took but never sent are lost with it), and
// that a stream failing in the middle of a request makes its table count
// samples that never arrived and are asked for again (see
// SamplerOptions.MaxSamples). A share stays with a server that is up even
// while its table makes samples wait (an empty table, a rate limiter); set
// RateLimiterTimeout to bound that.
//
// A PoolSampler is safe for concurrent use; each sample is returned once.
type PoolSampler struct {
	pool    *Pool
	opts    SamplerOptions // per server; MaxSamples set per share
	limited bool
	max     int64 // MaxSamples, when limited
	share   int64 // largest share of the budget given to one server

	ctx    context.Context // feeders' context; cancelled by Close
	cancel context.CancelFunc
	out    chan Sample   // merged samples; closed when every feeder exited
	exited chan struct{} // closed after out is closed
	wg     sync.WaitGroup

	mu         sync.Mutex // guards the fields below
	unassigned int64      // budget not handed to any server yet
	delivered  int64      // samples pushed to out
	budget     chan struct{}
	err        error // first terminal error of a server
	live       int   // feeders still running
	closed     bool
}

// NewSampler starts a merged sampler of opts.Table on every server of the
// pool; see PoolSampler. opts are those of Client.NewSampler, applied to
// each server, except MaxSamples, which counts samples across the pool. A
// nil Logger means the pool's.
func (p *Pool) NewSampler(opts SamplerOptions) (*PoolSampler, error) {
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
	if opts.Logger == nil {
		opts.Logger = p.log
	}
	n := len(p.members)
	s := &PoolSampler{
		pool:    p,
		opts:    opts,
		limited: opts.MaxSamples > 0,
		max:     opts.MaxSamples,
		out:     make(chan Sample, n),
		exited:  make(chan struct{}),
		budget:  make(chan struct{}),
		live:    n,
	}
	if s.limited {
		inFlight := int64(opts.MaxInFlightSamplesPerWorker)
		if inFlight == 0 {
			inFlight = DefaultMaxInFlightSamplesPerWorker
		}
		// min(NumWorkers × inFlight, fair), without overflow for a
		// MaxSamples or NumWorkers near the largest integers.
		fair := ceilDiv(s.max, int64(n))
		s.share = fair
		if w := int64(max(opts.NumWorkers, 1)); w <= fair/inFlight {
			s.share = w * inFlight
		}
		s.unassigned = s.max
		s.opts.MaxSamples = 0
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	samplers := make([]*Sampler, n)
	if !s.limited {
		for i, m := range p.members {
			smp, err := m.c.NewSampler(s.opts)
			if err != nil {
				for _, prev := range samplers[:i] {
					prev.Close()
				}
				s.cancel()
				return nil, err
			}
			samplers[i] = smp
		}
	}
	s.wg.Add(n)
	for i, m := range p.members {
		if s.limited {
			go s.feedShares(m)
		} else {
			go s.feed(m, samplers[i])
		}
	}
	go func() {
		s.wg.Wait()
		close(s.out)
		close(s.exited)
	}()
	return s, nil
}

// feed forwards the samples of one server's unlimited Sampler.
func (s *PoolSampler) feed(m *poolMember, smp *Sampler) {
	defer s.wg.Done()
	defer smp.Close()
	for {
		sample, err := smp.Next(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				s.serverEnded(m, err)
			}
			return
		}
		if !s.deliver(sample) {
			return
		}
	}
}

// feedShares fetches shares of the MaxSamples budget from one server until
// the budget is delivered, the sampler is closed, or the server fails for
// good. A share is given back when the server has been down for the
// failover delay, and the next one is taken only once it is up again.
func (s *PoolSampler) feedShares(m *poolMember) {
	defer s.wg.Done()
	for {
		if !s.waitUp(m) {
			return
		}
		n := s.take()
		if n == 0 {
			return
		}
		opts := s.opts
		opts.MaxSamples = n
		smp, err := m.c.NewSampler(opts)
		if err != nil { // cannot happen: the options were checked
			s.giveBack(n)
			s.serverEnded(m, err)
			return
		}
		got, failed, err := s.drain(m, smp)
		smp.Close()
		if s.ctx.Err() != nil {
			return
		}
		s.giveBack(n - got)
		switch {
		case err == nil:
		case failed:
			s.pool.log.Warn("reverie pool: server down; its share of samples goes to the others",
				"addr", m.c.addr, "table", s.opts.Table, "returned_samples", n-got)
		default:
			s.serverEnded(m, err)
			return
		}
	}
}

// drain forwards the samples of one share. failed reports that it stopped
// because the server has been down for the failover delay.
func (s *PoolSampler) drain(m *poolMember, smp *Sampler) (got int64, failed bool, err error) {
	ctx, stop := s.pool.whileUp(s.ctx, m)
	defer func() { failed = stop() && err != nil }()
	for {
		sample, nerr := smp.Next(ctx)
		if errors.Is(nerr, io.EOF) {
			return got, false, nil
		}
		if nerr != nil {
			return got, false, nerr
		}
		if !s.deliver(sample) {
			return got, false, s.ctx.Err()
		}
		got++
	}
}

// waitUp waits until the member is up; it reports false when the sampler
// stops or the budget is delivered first.
func (s *PoolSampler) waitUp(m *poolMember) bool {
	for {
		up, _, changed, _ := s.pool.state(m)
		if up {
			return true
		}
		s.mu.Lock()
		done, budget := s.delivered >= s.max, s.budget
		s.mu.Unlock()
		if done {
			return false
		}
		select {
		case <-changed:
		case <-budget:
		case <-s.ctx.Done():
			return false
		}
	}
}

// take reserves the next share of the budget, waiting while all of it is
// handed out but not delivered. It returns 0 when the budget is delivered
// or the sampler stops.
func (s *PoolSampler) take() int64 {
	for {
		s.mu.Lock()
		if s.ctx.Err() != nil || s.delivered >= s.max {
			s.mu.Unlock()
			return 0
		}
		if s.unassigned > 0 {
			n := min(s.share, s.unassigned)
			s.unassigned -= n
			s.mu.Unlock()
			return n
		}
		wait := s.budget
		s.mu.Unlock()
		select {
		case <-wait:
		case <-s.ctx.Done():
			return 0
		}
	}
}

// giveBack returns n samples of a share that were not delivered.
func (s *PoolSampler) giveBack(n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.unassigned += n
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *PoolSampler) notifyLocked() {
	close(s.budget)
	s.budget = make(chan struct{})
}

// deliver pushes a sample to the caller, waiting for room.
func (s *PoolSampler) deliver(smp Sample) bool {
	select {
	case s.out <- smp:
	case <-s.ctx.Done():
		return false
	}
	s.mu.Lock()
	s.delivered++
	if s.limited && s.delivered >= s.max {
		s.notifyLocked() // wake feeders waiting for budget so that they exit
	}
	s.mu.Unlock()
	return true
}

// serverEnded records a server's terminal error.
func (s *PoolSampler) serverEnded(m *poolMember, err error) {
	err = fmt.Errorf("pool sampler: %s: %w", m.c.addr, err)
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.live--
	live := s.live
	s.mu.Unlock()
	if live > 0 {
		s.pool.log.Warn("reverie pool: sampling from a server ended; going on with the others",
			"addr", m.c.addr, "table", s.opts.Table, "err", err, "servers_left", live)
	}
}

// Next returns the next sample from any server; see PoolSampler and
// Sampler.Next. After MaxSamples samples it returns io.EOF, after Close
// ErrClosed.
func (s *PoolSampler) Next(ctx context.Context) (Sample, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return Sample{}, fmt.Errorf("%w: pool sampler", ErrClosed)
	}
	select {
	case smp, ok := <-s.out:
		if ok {
			return smp, nil
		}
		return Sample{}, s.endErr()
	case <-ctx.Done():
		return Sample{}, ctx.Err()
	}
}

// endErr is what Next returns once every feeder has exited and the
// merged samples are gone.
func (s *PoolSampler) endErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("%w: pool sampler", ErrClosed)
	case s.limited && s.delivered >= s.max:
		return io.EOF
	case s.err != nil:
		return s.err
	default:
		return fmt.Errorf("%w: pool sampler", ErrClosed)
	}
}

// Samples returns an iterator over the merged samples; see
// Sampler.Samples.
func (s *PoolSampler) Samples(ctx context.Context) iter.Seq2[Sample, error] {
	return samplesOf(ctx, s.Next)
}

// Batches returns an iterator over batches of n merged samples; see
// Sampler.Batches.
func (s *PoolSampler) Batches(ctx context.Context, n int) iter.Seq2[Batch, error] {
	return batchesOf(ctx, n, s.Next)
}

// Close stops every server's Sampler and waits for them to exit. Merged
// samples not yet returned are dropped. Close is idempotent and returns
// nil.
func (s *PoolSampler) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.exited
	return nil
}
