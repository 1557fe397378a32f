// Command churn is a soak of connection churn: workers that dial, write,
// sample and hang up at random, for as long as --duration, against one
// server. It looks for what a steady benchmark does not exercise: streams
// cancelled mid-message, connections dropped with streams open, writers
// closed with items in flight, samplers abandoned with samples prefetched,
// and payloads of every size on the same connections. Each payload carries
// a hash of itself, so a sample whose bytes were damaged anywhere between
// the writer and the sampler is caught.
//
//	churn --addr 127.0.0.1:8000 --table t --duration 10m --workers 16 \
//	    [--payloads 400,4000,40000,400000] [--metrics http://127.0.0.1:9090/metrics] \
//	    [--server-pid PID] [--seed 1] [--tls-ca F [--tls-cert F --tls-key F] [--token-file F]]
//
// Every --report interval it prints the calls made, the items written and
// sampled, the errors it caused on purpose (cancelled contexts, dropped
// connections) and those it did not, and, given --server-pid and --metrics,
// the server's resident memory, threads and goroutines. At the end, with
// every client gone, it waits for the server's goroutines to come back to
// within --goroutine-slack of their count before the first client, and
// exits 1 if they do not, if any payload came back damaged, or if any call
// failed in a way it did not cause.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/client/connflags"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type options struct {
	addr, table    string
	duration       time.Duration
	report         time.Duration
	workers        int
	payloads       []int
	seed           uint64
	metrics        string
	serverPID      int
	goroutineSlack int
	dial           []client.Option // TLS and a token, from the connection flags
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		os.Exit(2)
	}
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("churn", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8000", "server address")
	fs.StringVar(&o.table, "table", "t", "table to write to and sample from (any selector; items are one step of one column)")
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long to churn")
	fs.DurationVar(&o.report, "report", 30*time.Second, "how often to print progress")
	fs.IntVar(&o.workers, "workers", 16, "concurrent workers, each with its own connections")
	payloads := fs.String("payloads", "400,4000,40000,400000", "payload sizes in bytes, picked uniformly per writer (at least 16)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the workers' choices")
	fs.StringVar(&o.metrics, "metrics", "", "the server's Prometheus /metrics URL, for its goroutine count")
	fs.IntVar(&o.serverPID, "server-pid", 0, "the server's pid, for its memory and threads (/proc)")
	fs.IntVar(&o.goroutineSlack, "goroutine-slack", 20, "goroutines the server may hold at the end beyond its count before the first client")
	var conn connflags.Flags
	conn.Register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.dial, err = conn.Options(); err != nil {
		return o, err
	}
	for _, f := range strings.Split(*payloads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 16 {
			return o, fmt.Errorf("--payloads: %q is not a size of at least 16 bytes", f)
		}
		o.payloads = append(o.payloads, n)
	}
	if o.workers < 1 || o.duration <= 0 || o.report <= 0 {
		return o, errors.New("--workers, --duration and --report must be positive")
	}
	return o, nil
}

// counters are the run's totals, updated by every worker.
type counters struct {
	dials, writers, samplers, infos, mutates, drops atomic.Int64
	written, sampled, sampledBytes                  atomic.Int64
	caused, unexpected, damaged                     atomic.Int64
}

type churn struct {
	o    options
	c    counters
	seed maphash.Seed
	log  *slog.Logger

	mu       sync.Mutex
	firstErr []string // the first unexpected errors, for the report
}

func run(o options, out io.Writer) error {
	ch := &churn{o: o, seed: maphash.MakeSeed(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	base, err := ch.goroutines()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "churn: %d workers for %v on %s table %q, payloads %v; server goroutines before: %s\n",
		o.workers, o.duration, o.addr, o.table, o.payloads, fmtCount(base))

	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := range o.workers {
		rng := rand.New(rand.NewPCG(o.seed, uint64(i)))
		wg.Go(func() { ch.worker(ctx, rng, uint64(i)) })
	}
	start := time.Now()
	tick := time.NewTicker(o.report)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
loop:
	for {
		select {
		case <-tick.C:
			ch.progress(out, time.Since(start))
		case <-done:
			break loop
		}
	}
	tick.Stop()
	ch.progress(out, time.Since(start))

	// Every client is closed: the server's goroutines for them should end.
	var after int
	if base >= 0 {
		deadline := time.Now().Add(15 * time.Second)
		for {
			if after, err = ch.goroutines(); err != nil {
				return err
			}
			if after <= base+o.goroutineSlack || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		fmt.Fprintf(out, "server goroutines: %d before the first client, %d after the last\n", base, after)
	}

	ch.mu.Lock()
	for _, e := range ch.firstErr {
		fmt.Fprintln(out, "unexpected:", e)
	}
	ch.mu.Unlock()
	var fail []string
	if n := ch.c.unexpected.Load(); n > 0 {
		fail = append(fail, fmt.Sprintf("%d unexpected errors", n))
	}
	if n := ch.c.damaged.Load(); n > 0 {
		fail = append(fail, fmt.Sprintf("%d damaged samples", n))
	}
	if base >= 0 && after > base+o.goroutineSlack {
		fail = append(fail, fmt.Sprintf("the server holds %d goroutines after the last client, %d before the first", after, base))
	}
	if ch.c.written.Load() == 0 || ch.c.sampled.Load() == 0 {
		fail = append(fail, "nothing was written or nothing sampled")
	}
	if len(fail) > 0 {
		return errors.New(strings.Join(fail, "; "))
	}
	fmt.Fprintln(out, "churn: ok")
	return nil
}

func (ch *churn) progress(out io.Writer, d time.Duration) {
	c := &ch.c
	line := fmt.Sprintf("%7.0fs  dials %d  writers %d  samplers %d  info %d  mutate %d  drops %d  written %d  sampled %d (%.0f MB)  caused %d  unexpected %d  damaged %d",
		d.Seconds(), c.dials.Load(), c.writers.Load(), c.samplers.Load(), c.infos.Load(), c.mutates.Load(), c.drops.Load(),
		c.written.Load(), c.sampled.Load(), float64(c.sampledBytes.Load())/1e6, c.caused.Load(), c.unexpected.Load(), c.damaged.Load())
	if ch.o.serverPID > 0 {
		if rss, threads, err := procStatus(ch.o.serverPID); err == nil {
			line += fmt.Sprintf("  server RSS %d MB threads %d", rss>>20, threads)
		}
	}
	if g, err := ch.goroutines(); err == nil && g >= 0 {
		line += fmt.Sprintf(" goroutines %d", g)
	}
	fmt.Fprintln(out, line)
}

// worker churns until ctx ends: each round it may hang up and dial anew,
// then does one thing at random.
func (ch *churn) worker(ctx context.Context, rng *rand.Rand, id uint64) {
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	var keys []uint64 // keys seen in samples, for priority updates
	for ctx.Err() == nil {
		if c == nil || rng.IntN(4) == 0 {
			if c != nil {
				c.Close()
			}
			var err error
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			c, err = client.Dial(dctx, ch.o.addr, ch.o.dial...)
			cancel()
			ch.c.dials.Add(1)
			if err != nil {
				c = nil
				ch.check(ctx, "dial", err, false)
				continue
			}
		}
		switch r := rng.IntN(100); {
		case r < 45:
			ch.write(ctx, c, rng, nil)
		case r < 85:
			keys = ch.sample(ctx, c, rng, nil, keys)
		case r < 90:
			ch.c.infos.Add(1)
			ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.ServerInfo(ictx)
			cancel()
			ch.check(ctx, "ServerInfo", err, false)
		case r < 95:
			ch.c.mutates.Add(1)
			up := map[uint64]float64{}
			for _, k := range keys {
				up[k] = rng.Float64() * 10
			}
			keys = keys[:0]
			mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.MutatePriorities(mctx, ch.o.table, up, nil)
			cancel()
			ch.check(ctx, "MutatePriorities", err, false)
		default:
			// Hang up with a writer and a sampler busy on the connection.
			ch.c.drops.Add(1)
			drop := make(chan struct{})
			var wg sync.WaitGroup
			wrng := rand.New(rand.NewPCG(rng.Uint64(), id))
			srng := rand.New(rand.NewPCG(rng.Uint64(), id))
			wg.Go(func() { ch.write(ctx, c, wrng, drop) })
			wg.Go(func() { ch.sample(ctx, c, srng, drop, nil) })
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			close(drop)
			c.Close()
			wg.Wait()
			c = nil
		}
	}
}

// write appends 1-8 steps of one payload size with an item per step, then
// flushes and closes the writer, closes it with items unconfirmed, or
// flushes with a deadline too short to be met. With drop, the connection
// is closed under it at some point, and any failure after that is caused.
func (ch *churn) write(ctx context.Context, c *client.Client, rng *rand.Rand, drop <-chan struct{}) {
	ch.c.writers.Add(1)
	size := ch.o.payloads[rng.IntN(len(ch.o.payloads))]
	w, err := c.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1, Logger: ch.log})
	if err != nil {
		ch.check(ctx, "NewTrajectoryWriter", err, dropped(drop))
		return
	}
	defer w.Close()
	buf := make([]byte, size)
	steps := 1 + rng.IntN(8)
	for range steps {
		ch.fill(buf, rng)
		t, err := client.NewTensor(client.DTUint8, []int64{int64(size)}, buf)
		if err == nil {
			err = w.Append(ctx, map[string]client.Tensor{"x": t})
		}
		if err == nil {
			err = w.CreateItem(ctx, ch.o.table, 1+rng.Float64(), []client.TrajectoryColumn{w.History("x").Last(1)})
		}
		if err != nil {
			ch.check(ctx, "writing", err, dropped(drop))
			return
		}
	}
	switch r := rng.IntN(10); {
	case r < 7:
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := w.Flush(fctx)
		cancel()
		if err == nil {
			ch.c.written.Add(int64(steps))
		}
		ch.check(ctx, "Flush", err, dropped(drop))
	case r < 9:
		// Close with items unconfirmed: the writer cancels its stream.
	default:
		fctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
		err := w.Flush(fctx)
		cancel()
		ch.check(ctx, "Flush (short deadline)", err, true)
	}
}

// sample takes 1-64 samples with a sampler of random depth and checks each
// payload's hash; one sampler in ten is abandoned with a context that ends
// under it. With drop, the connection is closed under it at some point.
// It returns keys with those sampled appended.
func (ch *churn) sample(ctx context.Context, c *client.Client, rng *rand.Rand, drop <-chan struct{}, keys []uint64) []uint64 {
	ch.c.samplers.Add(1)
	s, err := c.NewSampler(client.SamplerOptions{
		Table:                       ch.o.table,
		NumWorkers:                  1 + rng.IntN(2),
		MaxInFlightSamplesPerWorker: 1 + rng.IntN(32),
		RateLimiterTimeout:          2 * time.Second,
		Logger:                      ch.log,
	})
	if err != nil {
		ch.check(ctx, "NewSampler", err, dropped(drop))
		return keys
	}
	defer s.Close()
	n := 1 + rng.IntN(64)
	cut := rng.IntN(10) == 0
	timeout := 30 * time.Second
	if cut {
		timeout = time.Duration(rng.IntN(5000)) * time.Microsecond
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for range n {
		smp, err := s.Next(sctx)
		if err != nil {
			if errors.Is(err, client.ErrRateLimiterTimeout) && !cut {
				return keys // an empty table at the start
			}
			ch.check(ctx, "Sampler.Next", err, cut || dropped(drop))
			return keys
		}
		ch.c.sampled.Add(1)
		if len(smp.Columns) != 1 || !ch.intact(smp.Columns[0].Data) {
			ch.c.damaged.Add(1)
			ch.note(fmt.Sprintf("item %d: payload damaged (%d columns)", smp.Info.Key, len(smp.Columns)))
			continue
		}
		ch.c.sampledBytes.Add(int64(len(smp.Columns[0].Data)))
		if len(keys) < 64 {
			keys = append(keys, smp.Info.Key)
		}
	}
	return keys
}

// fill makes buf random, with the hash of the rest in its first 8 bytes.
func (ch *churn) fill(buf []byte, rng *rand.Rand) {
	for i := 8; i < len(buf); i += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], rng.Uint64())
		copy(buf[i:], b[:])
	}
	binary.LittleEndian.PutUint64(buf, maphash.Bytes(ch.seed, buf[8:]))
}

func (ch *churn) intact(b []byte) bool {
	return len(b) >= 16 && binary.LittleEndian.Uint64(b) == maphash.Bytes(ch.seed, b[8:])
}

func dropped(drop <-chan struct{}) bool {
	if drop == nil {
		return false
	}
	select {
	case <-drop:
		return true
	default:
		return false
	}
}

// check counts err: none, caused (the run ending, a deadline or a hang-up
// this worker made), or unexpected.
func (ch *churn) check(ctx context.Context, what string, err error, caused bool) {
	switch {
	case err == nil:
	case caused || ctx.Err() != nil || endedByServer(ctx, err):
		ch.c.caused.Add(1)
	default:
		ch.c.unexpected.Add(1)
		ch.note(what + ": " + err.Error())
	}
}

// endedByServer reports whether err is the server ending a call at the
// run's deadline. A call's deadline travels to the server as grpc-timeout,
// and on a busy machine the server's timer can fire and its answer arrive
// before this process's timer for the same deadline has run: the call
// fails with DEADLINE_EXCEEDED while ctx.Err() is still nil. The client
// hands some calls' DEADLINE_EXCEEDED back as the status and turns others'
// (MutatePriorities, ServerInfo) into context.DeadlineExceeded; both are it.
func endedByServer(ctx context.Context, err error) bool {
	dl, ok := ctx.Deadline()
	deadline := status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)
	return ok && deadline && time.Until(dl) < time.Millisecond
}

func (ch *churn) note(s string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.firstErr) < 10 {
		ch.firstErr = append(ch.firstErr, s)
	}
}

// goroutines reads go_goroutines from the server's metrics, or -1 without
// --metrics.
func (ch *churn) goroutines() (int, error) {
	if ch.o.metrics == "" {
		return -1, nil
	}
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(ch.o.metrics)
	if err != nil {
		return 0, fmt.Errorf("reading the server's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no go_goroutines in %s", ch.o.metrics)
}

// procStatus returns pid's resident memory in bytes and its threads.
func procStatus(pid int) (rss int64, threads int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		f := strings.Fields(v)
		switch {
		case k == "VmRSS" && len(f) > 0:
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			rss = kb << 10
		case k == "Threads" && len(f) > 0:
			threads, _ = strconv.Atoi(f[0])
		}
	}
	return rss, threads, nil
}

func fmtCount(n int) string {
	if n < 0 {
		return "not read (no --metrics)"
	}
	return strconv.Itoa(n)
}
