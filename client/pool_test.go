package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/selector"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// ptServer is an in-process server on a loopback port that a test can
// kill.
type ptServer struct {
	addr string
	kill func() // stops the server at once; idempotent
}

func ptStart(t *testing.T, tables ...server.TableConfig) *ptServer {
	t.Helper()
	srv, err := server.New(server.Config{Tables: tables, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	s := &ptServer{addr: lis.Addr().String()}
	s.kill = sync.OnceFunc(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	t.Cleanup(s.kill)
	return s
}

func ptUniform(name string) server.TableConfig {
	return server.TableConfig{
		Name:        name,
		Sampler:     selector.Spec{Kind: selector.KindUniform},
		Remover:     selector.Spec{Kind: selector.KindFIFO},
		MaxSize:     100_000,
		RateLimiter: server.MinSize(1),
	}
}

// ptLogs is a log sink safe for concurrent writes.
type ptLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *ptLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *ptLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func ptPool(t *testing.T, logs io.Writer, addrs ...string) *client.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if logs == nil {
		logs = io.Discard
	}
	p, err := client.DialPool(ctx, addrs, client.PoolOptions{
		Logger:        slog.New(slog.NewTextHandler(logs, nil)),
		FailoverDelay: 150 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("DialPool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func ptStep(i int) map[string]client.Tensor {
	return map[string]client.Tensor{"obs": client.Vector([]float32{float32(i), float32(i) + 0.5})}
}

func ptInserts(t *testing.T, c *client.Client, table string) (inserts, samples int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.ServerInfo(ctx)
	if err != nil {
		t.Fatalf("ServerInfo(%s): %v", c.Addr(), err)
	}
	return info[table].Inserts, info[table].Samples
}

// TestPoolFailover runs three writers and a merged sampler over three
// servers, kills one server, and checks that writing and sampling go on
// without an error reaching the caller, that the killed server's writer
// moved, that no confirmed item was lost, and that warnings were logged.
func TestPoolFailover(t *testing.T) {
	var servers []*ptServer
	var addrs []string
	for range 3 {
		s := ptStart(t, ptUniform("t"))
		servers = append(servers, s)
		addrs = append(addrs, s.addr)
	}
	var logs ptLogs
	pool := ptPool(t, &logs, addrs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	writers := make([]*client.PoolWriter, 3)
	seen := map[string]bool{}
	for i := range writers {
		w, err := pool.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 2})
		if err != nil {
			t.Fatal(err)
		}
		writers[i] = w
		seen[w.Addr()] = true
	}
	if len(seen) != 3 {
		t.Fatalf("writers on %v, want one per server", seen)
	}
	sampler, err := pool.NewSampler(client.SamplerOptions{Table: "t", MaxInFlightSamplesPerWorker: 8})
	if err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var wg sync.WaitGroup
	var flushed [3]atomic.Int64 // items confirmed by a Flush, per writer
	var sampled atomic.Int64
	errs := make(chan error, 10)
	for i, w := range writers {
		wg.Go(func() {
			for step := 0; ; step++ {
				select {
				case <-stop:
					if err := w.Flush(ctx); err != nil {
						errs <- err
					}
					return
				default:
				}
				if err := w.Append(ctx, ptStep(step)); err != nil {
					errs <- err
					return
				}
				if err := w.CreateItem(ctx, "t", 1, []client.PoolTrajectoryColumn{w.History("obs").Last(2)}); err != nil {
					// The first step has no predecessor.
					if step == 0 && errors.Is(err, client.ErrInvalidArgument) {
						continue
					}
					errs <- err
					return
				}
				if step%5 == 0 {
					if err := w.Flush(ctx); err != nil {
						errs <- err
						return
					}
					flushed[i].Store(int64(step))
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for smp, err := range sampler.Samples(sctx) {
			if err != nil {
				select {
				case <-stop:
				default:
					errs <- err
				}
				return
			}
			if len(smp.Columns) != 1 || smp.Columns[0].Shape[0] != 2 {
				errs <- errors.New("sample with the wrong shape")
				return
			}
			sampled.Add(1)
		}
	})

	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			select {
			case err := <-errs:
				t.Fatalf("while waiting for %s: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("items and samples", func() bool {
		return flushed[0].Load() >= 20 && flushed[1].Load() >= 20 && flushed[2].Load() >= 20 && sampled.Load() >= 100
	})

	// Kill the server of writer 0.
	victim := -1
	for i, s := range servers {
		if s.addr == writers[0].Addr() {
			victim = i
		}
	}
	servers[victim].kill()
	// Items the killed server confirmed are lost; they were all created
	// before the kill.
	lostAtMost := int64(writers[0].EpisodeSteps())
	var after [3]int64
	for i := range after {
		after[i] = flushed[i].Load()
	}
	sampledAfter := sampled.Load()
	wait("writing and sampling to go on", func() bool {
		for i := range after {
			if flushed[i].Load() < after[i]+30 {
				return false
			}
		}
		return sampled.Load() >= sampledAfter+200
	})
	close(stop)
	scancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("error reached the caller: %v", err)
	}
	if got := writers[0].Addr(); got == servers[victim].addr {
		t.Errorf("writer 0 is still on the killed server %s", got)
	}

	// Every item confirmed by a Flush is on a live server, except those
	// the killed server held.
	var created, live int64
	for i, w := range writers {
		created += int64(w.EpisodeSteps()) - 1 // every step but the first made an item
		if err := w.Close(); err != nil {
			t.Error(err)
		}
		if i != victim {
			n, _ := ptInserts(t, pool.Clients()[i], "t")
			live += n
		}
	}
	if live < created-lostAtMost {
		t.Errorf("live servers hold %d items; %d were created and at most %d were lost", live, created, lostAtMost)
	}
	sampler.Close()
	if err := pool.Close(); err != nil {
		t.Error(err)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "reverie pool: connection to a server lost") ||
		!strings.Contains(out, "reverie pool: writer moved") {
		t.Errorf("missing warnings; logs:\n%s", out)
	}
}

// TestPoolWriterReplay kills a writer's server while every item is still
// pending and checks that the items, including ones over steps that have
// left the history, are re-created on the next server with their data.
func TestPoolWriterReplay(t *testing.T) {
	// a's queue holds one item, so the items after the first stay
	// unconfirmed there until a is killed: a writer whose items were all
	// confirmed would have nothing to move (its Flush succeeds), and the
	// items would be lost with a, as the pool documents.
	a := ptStart(t, server.QueueTable("q", 1))
	b := ptStart(t, server.QueueTable("q", 100))
	var logs ptLogs
	pool := ptPool(t, &logs, a.addr, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := pool.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 3, ChunkLength: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Addr() != a.addr {
		t.Fatalf("first writer on %s, want %s", w.Addr(), a.addr)
	}

	// want[i] lists the steps of item i; nil marks an item squeezed to one
	// step (the second to last).
	type item struct {
		steps   []int
		squeeze bool
	}
	var want []item
	for i := range 8 {
		step := ptStep(i)
		if i%3 == 2 {
			step["extra"] = client.Scalar(int32(i)) // a partial column
		}
		if err := w.Append(ctx, step); err != nil {
			t.Fatal(err)
		}
		if i >= 1 {
			if err := w.CreateItem(ctx, "q", 1, []client.PoolTrajectoryColumn{w.History("obs").Last(2)}); err != nil {
				t.Fatal(err)
			}
			want = append(want, item{steps: []int{i - 1, i}})
		}
		if i >= 2 && i%2 == 0 {
			if err := w.CreateItem(ctx, "q", 2, []client.PoolTrajectoryColumn{w.History("obs").At(-3).Squeeze()}); err != nil {
				t.Fatal(err)
			}
			want = append(want, item{steps: []int{i - 2}, squeeze: true})
		}
	}
	if col := w.History("extra").Last(2); col.Err() == nil {
		t.Error("a column over a gap was accepted")
	}
	if col := w.History("nope").At(0); col.Err() == nil {
		t.Error("an unknown column was accepted")
	}

	a.kill()
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after the kill: %v", err)
	}
	if w.Addr() != b.addr {
		t.Fatalf("writer on %s after the kill, want %s", w.Addr(), b.addr)
	}
	// Items made after the move reference steps appended before it.
	if err := w.CreateItem(ctx, "q", 3, []client.PoolTrajectoryColumn{w.History("obs").Slice(0, 3)}); err != nil {
		t.Fatal(err)
	}
	want = append(want, item{steps: []int{5, 6, 7}})
	if err := w.EndEpisode(ctx, true); err != nil {
		t.Fatal(err)
	}
	if w.EpisodeSteps() != 0 || w.History("obs").Len() != 0 {
		t.Errorf("after EndEpisode: %d steps, history %d", w.EpisodeSteps(), w.History("obs").Len())
	}

	c := pool.Clients()[1]
	smp, err := c.NewSampler(client.SamplerOptions{Table: "q", MaxSamples: int64(len(want))})
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	i := 0
	for s, err := range smp.Samples(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		var vals []float32
		for _, st := range want[i].steps {
			vals = append(vals, float32(st), float32(st)+0.5)
		}
		wantT := client.Vector(vals)
		if !want[i].squeeze {
			wantT, _ = client.FromSlice(vals, int64(len(want[i].steps)), 2)
		}
		if !s.Columns[0].Equal(wantT) {
			t.Errorf("item %d: got %v %v, want %v %v", i, s.Columns[0].Shape, s.Columns[0], wantT.Shape, wantT)
		}
		i++
	}
	if i != len(want) {
		t.Errorf("sampled %d items, want %d", i, len(want))
	}
	if !strings.Contains(logs.String(), "reverie pool: writer moved") {
		t.Errorf("no move logged:\n%s", logs.String())
	}
}

// TestPoolSamplerMaxSamples checks that MaxSamples counts across the pool
// without over-sampling, and that the budget survives a dead server.
func TestPoolSamplerMaxSamples(t *testing.T) {
	var servers []*ptServer
	var addrs []string
	for range 3 {
		s := ptStart(t, ptUniform("t"))
		servers = append(servers, s)
		addrs = append(addrs, s.addr)
	}
	pool := ptPool(t, nil, addrs...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range pool.Clients() {
		for i := range 5 {
			if err := c.Insert(ctx, []client.Tensor{client.Scalar(int64(i))}, map[string]float64{"t": 1}); err != nil {
				t.Fatal(err)
			}
		}
	}

	s, err := pool.NewSampler(client.SamplerOptions{Table: "t", MaxSamples: 40, MaxInFlightSamplesPerWorker: 4})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range s.Samples(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	s.Close()
	if n != 40 {
		t.Errorf("got %d samples, want 40", n)
	}
	var total int64
	for _, c := range pool.Clients() {
		_, smp := ptInserts(t, c, "t")
		if smp == 0 {
			t.Errorf("server %s was not sampled", c.Addr())
		}
		total += smp
	}
	if total != 40 {
		t.Errorf("the servers served %d samples, want 40", total)
	}

	// Kill a server half-way: the rest of the budget comes from the others.
	s, err = pool.NewSampler(client.SamplerOptions{Table: "t", MaxSamples: 60, MaxInFlightSamplesPerWorker: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 10 {
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	servers[0].kill()
	for i := 10; i < 60; i++ {
		if _, err := s.Next(ctx); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
	}
	if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("after MaxSamples: %v, want io.EOF", err)
	}
}

// TestPoolSamplerLargestOptions: a MaxSamples near math.MaxInt64, split
// over the servers, used to overflow to negative shares (in the fair split
// of MaxSamples, or in NumWorkers × MaxInFlightSamplesPerWorker); the
// feeders then failed or waited for budget forever, and Next blocked until
// its ctx ended.
func TestPoolSamplerLargestOptions(t *testing.T) {
	a := ptStart(t, ptUniform("t"))
	b := ptStart(t, ptUniform("t"))
	pool := ptPool(t, nil, a.addr, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range pool.Clients() {
		if err := c.Insert(ctx, []client.Tensor{client.Scalar(int64(1))}, map[string]float64{"t": 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, opts := range []client.SamplerOptions{
		{Table: "t", MaxSamples: math.MaxInt64},
		{Table: "t", MaxSamples: math.MaxInt64 - 1, NumWorkers: 4, MaxInFlightSamplesPerWorker: math.MaxInt / 2},
	} {
		s, err := pool.NewSampler(opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if _, err := s.Next(ctx); err != nil {
				t.Fatalf("%+v: sample %d: %v", opts, i, err)
			}
		}
		s.Close()
	}
}

func TestPoolSamplerUnknownTable(t *testing.T) {
	a := ptStart(t, ptUniform("t"))
	b := ptStart(t, ptUniform("t"))
	var logs ptLogs
	pool := ptPool(t, &logs, a.addr, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, max := range []int64{0, 10} {
		s, err := pool.NewSampler(client.SamplerOptions{Table: "nope", MaxSamples: max})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(ctx); !errors.Is(err, client.ErrTableNotFound) {
			t.Errorf("MaxSamples %d: Next = %v, want ErrTableNotFound", max, err)
		}
		s.Close()
	}
	if _, err := pool.NewSampler(client.SamplerOptions{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("NewSampler without a table: %v", err)
	}
}

// TestPoolDNS uses one dns:/// name, which gRPC balances round-robin.
func TestPoolDNS(t *testing.T) {
	s := servertest.Start(t, server.Config{Tables: []server.TableConfig{ptUniform("t")}})
	_, port, err := net.SplitHostPort(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	pool := ptPool(t, nil, "dns:///localhost:"+port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := pool.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 5 {
		if err := w.Append(ctx, ptStep(i)); err != nil {
			t.Fatal(err)
		}
		if err := w.CreateItem(ctx, "t", 1, []client.PoolTrajectoryColumn{w.History("obs").At(0).Squeeze()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	smp, err := pool.NewSampler(client.SamplerOptions{Table: "t", MaxSamples: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	n := 0
	for _, err := range smp.Samples(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 5 {
		t.Errorf("got %d samples, want 5", n)
	}
}

func TestDialPoolUnreachable(t *testing.T) {
	a := ptStart(t, ptUniform("t"))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = client.DialPool(ctx, []string{a.addr, dead}, client.PoolOptions{})
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), dead) {
		t.Errorf("DialPool = %v, want ErrUnavailable naming %s", err, dead)
	}
	if _, err := client.DialPool(context.Background(), nil, client.PoolOptions{}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("DialPool without addresses: %v", err)
	}
}

// TestPoolConnectionsDoNotIdle: an idle connection is not a lost server.
// gRPC-Go lets a connection with no call open go idle (after 30 minutes by
// default; here the caller asks for 200 ms, which the pool overrides), and
// the pool used to log it lost and back, and skip it for new writers in
// between (found by review).
func TestPoolConnectionsDoNotIdle(t *testing.T) {
	a, b := ptStart(t, ptUniform("t")), ptStart(t, ptUniform("t"))
	logs := &ptLogs{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.DialPool(ctx, []string{a.addr, b.addr}, client.PoolOptions{
		Logger:        slog.New(slog.NewTextHandler(logs, nil)),
		FailoverDelay: 150 * time.Millisecond,
	}, client.WithDialOptions(grpc.WithIdleTimeout(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	time.Sleep(1500 * time.Millisecond) // no call on either connection
	if out := logs.String(); strings.Contains(out, "lost") {
		t.Fatalf("idle connections were reported lost:\n%s", out)
	}
}

// TestDialPoolLeavesCallersOptions: DialPool adds its own option without
// writing into the caller's slice, whose spare capacity each connection's
// goroutine used to fill at once (a race, found by review).
func TestDialPoolLeavesCallersOptions(t *testing.T) {
	a, b, c := ptStart(t, ptUniform("t")), ptStart(t, ptUniform("t")), ptStart(t, ptUniform("t"))
	opts := make([]client.Option, 1, 4)
	opts[0] = client.WithDialOptions()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.DialPool(ctx, []string{a.addr, b.addr, c.addr}, client.PoolOptions{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if spare := opts[1:2]; spare[0] != nil {
		t.Fatal("DialPool wrote into the caller's options past their length")
	}
}

// TestPoolWriterErrorsNameServer: an error a pool writer's server gives
// says which server it was.
func TestPoolWriterErrorsNameServer(t *testing.T) {
	a := ptStart(t, server.QueueTable("other", 100))
	pool := ptPool(t, nil, a.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := pool.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(ctx, ptStep(0)); err != nil {
		t.Fatal(err)
	}
	if err := w.CreateItem(ctx, "q", 1, []client.PoolTrajectoryColumn{w.History("obs").Last(1)}); err != nil {
		t.Fatal(err)
	}
	err = w.Flush(ctx)
	if !errors.Is(err, client.ErrTableNotFound) || !strings.Contains(err.Error(), a.addr) {
		t.Fatalf("Flush = %v; want a table-not-found error naming %s", err, a.addr)
	}
}

// silentProxy forwards TCP to a server until it goes silent: then it
// moves no more bytes but keeps every connection open, as a host that lost
// power or a network partition does (no reset, no FIN).
type silentProxy struct {
	addr   string
	ln     net.Listener
	silent chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
}

func startSilentProxy(t *testing.T, target string) *silentProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{addr: ln.Addr().String(), ln: ln, silent: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Go(func() { p.pipe(c, s) })
			wg.Go(func() { p.pipe(s, c) })
		}
	})
	return p
}

func (p *silentProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.silent:
			return // drop it; the connections stay open until cleanup
		default:
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestPoolWriterLeavesSilentServer: a server that goes silent without a
// reset is noticed by keepalive pings, and a writer's Flush fails over to
// another server instead of waiting on it. The test pings every 10 s, the
// least gRPC-Go allows (against reverie only; the default is 5 minutes,
// DefaultKeepaliveTime, for Reverb's servers).
func TestPoolWriterLeavesSilentServer(t *testing.T) {
	a := ptStart(t, server.QueueTable("q", 1000))
	b := ptStart(t, server.QueueTable("q", 1000))
	pa := startSilentProxy(t, a.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := client.DialPool(ctx, []string{pa.addr, b.addr},
		client.PoolOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FailoverDelay: 150 * time.Millisecond},
		client.WithDialOptions(grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: time.Second})))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	w, err := pool.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Addr() != pa.addr {
		t.Fatalf("the writer starts on %s, want the first server %s", w.Addr(), pa.addr)
	}
	step := func(i int) {
		if err := w.Append(ctx, ptStep(i)); err != nil {
			t.Fatal(err)
		}
		if err := w.CreateItem(ctx, "q", 1, []client.PoolTrajectoryColumn{w.History("obs").Last(1)}); err != nil {
			t.Fatal(err)
		}
	}
	step(0)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	close(pa.silent)
	step(1)
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	if err := w.Flush(fctx); err != nil {
		t.Fatalf("Flush with the writer's server silent: %v", err)
	}
	if w.Addr() != b.addr {
		t.Fatalf("the writer is on %s after the failover, want %s", w.Addr(), b.addr)
	}
	if ins, _ := ptInserts(t, pool.Clients()[1], "q"); ins != 1 {
		t.Fatalf("the second server holds %d inserts, want the item created while the first was silent", ins)
	}
}
