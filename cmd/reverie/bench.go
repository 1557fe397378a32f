package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/client/connflags"
	"google.golang.org/grpc"
)

// benchColumn is the name of the one column the bench writes.
const benchColumn = "payload"

// benchConfig holds the flags of "reverie bench".
type benchConfig struct {
	addr         string
	conn         connflags.Flags
	dialOpts     []client.Option // from conn, set by validate
	table        string
	mode         string // insert, sample or mixed
	payload      int    // bytes per item, a multiple of 4
	clients      int
	duration     time.Duration
	items        int64 // when > 0, replaces duration
	chunkLength  int
	compressible bool
	inFlight     int // samples in flight per sampler
	maxInFlight  int // unconfirmed items per writer
	timeout      time.Duration
	json         bool
	cpuProfile   string
}

func (c *benchConfig) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "localhost:8000", "server address: host:port, dns:///name:port or unix:///path")
	c.conn.Register(fs)
	fs.StringVar(&c.table, "table", "replay", "table to insert into and sample from")
	fs.StringVar(&c.mode, "mode", "insert", "insert, sample, or mixed (half the clients insert, half sample)")
	fs.IntVar(&c.payload, "payload", 400, "payload bytes per item: one float32 tensor of payload/4 elements")
	fs.IntVar(&c.clients, "clients", 1, "concurrent clients, each with its own connection")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to generate load")
	fs.Int64Var(&c.items, "items", 0, "stop after this many items inserted (insert, mixed) and sampled (sample, mixed) instead of after --duration")
	fs.IntVar(&c.chunkLength, "chunk-length", 1, "steps per chunk; items are still one step")
	fs.BoolVar(&c.compressible, "compressible", false, "payload of repeated values that snappy compresses, instead of random values")
	fs.IntVar(&c.inFlight, "in-flight", 16, "samples in flight per sampler (MaxInFlightSamplesPerWorker)")
	fs.IntVar(&c.maxInFlight, "max-in-flight-items", client.DefaultMaxInFlightItems, "unconfirmed items per writer (MaxInFlightItems)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the server to be reachable")
	fs.BoolVar(&c.json, "json", false, "print the results as one JSON object on stdout")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this client (not the server) to this file")
}

func (c *benchConfig) validate() error {
	var err error
	if c.dialOpts, err = c.conn.Options(); err != nil {
		return err
	}
	switch {
	case c.mode != "insert" && c.mode != "sample" && c.mode != "mixed":
		return fmt.Errorf("--mode: want insert, sample or mixed, got %q", c.mode)
	case c.table == "":
		return errors.New("--table: must not be empty")
	case c.payload < 4:
		return fmt.Errorf("--payload: must be at least 4 bytes (one float32), got %d", c.payload)
	case c.clients < 1:
		return fmt.Errorf("--clients: must be >= 1, got %d", c.clients)
	case c.mode == "mixed" && c.clients < 2:
		return errors.New("--clients: mixed mode needs at least 2 (one writer, one sampler)")
	case c.items < 0:
		return fmt.Errorf("--items: must be >= 0, got %d", c.items)
	case c.items == 0 && c.duration <= 0:
		return fmt.Errorf("--duration: must be positive, got %v", c.duration)
	case c.chunkLength < 1:
		return fmt.Errorf("--chunk-length: must be >= 1, got %d", c.chunkLength)
	case c.inFlight < 1:
		return fmt.Errorf("--in-flight: must be >= 1, got %d", c.inFlight)
	case c.maxInFlight < 1:
		return fmt.Errorf("--max-in-flight-items: must be >= 1, got %d", c.maxInFlight)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout: must be positive, got %v", c.timeout)
	}
	c.payload -= c.payload % 4
	return nil
}

// benchReport is what the bench prints; with --json, as is.
type benchReport struct {
	Mode         string       `json:"mode"`
	Addr         string       `json:"addr"`
	Table        string       `json:"table"`
	PayloadBytes int          `json:"payload_bytes"`
	Compressible bool         `json:"compressible"`
	ChunkLength  int          `json:"chunk_length"`
	Clients      int          `json:"clients"`
	InFlight     int          `json:"in_flight"`
	DurationSec  float64      `json:"duration_sec,omitempty"` // --duration, when it bounded the run
	ItemsLimit   int64        `json:"items_limit,omitempty"`  // --items
	Prefilled    int64        `json:"prefilled"`              // items inserted before sampling, not counted
	Insert       *kindReport  `json:"insert,omitempty"`
	Sample       *kindReport  `json:"sample,omitempty"`
	Errors       int64        `json:"errors"` // insert.errors + sample.errors
	Latency      latencyNotes `json:"latency_definition"`
}

type latencyNotes struct {
	Insert string `json:"insert,omitempty"`
	Sample string `json:"sample,omitempty"`
}

const (
	insertLatencyNote = "per item: from the start of Append to the server's confirmation of the item (read from the insert stream)"
	sampleLatencyNote = "per item: one Sampler.Next call (samples are prefetched, --in-flight per client)"
)

// kindReport gives the figures of one kind of client (writers or samplers).
type kindReport struct {
	Clients     int     `json:"clients"`
	Items       int64   `json:"items"` // confirmed inserts, or samples returned
	Bytes       int64   `json:"bytes"` // payload bytes of those items
	Seconds     float64 `json:"seconds"`
	ItemsPerSec float64 `json:"items_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"` // 1 MB = 1e6 bytes
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	FlushMs     float64 `json:"final_flush_ms,omitempty"` // longest final Flush of a writer
	Errors      int64   `json:"errors"`
	// The fewest and the most items one client of this kind moved: far
	// apart, they show a server that starves some clients.
	ClientItemsMin int64 `json:"client_items_min"`
	ClientItemsMax int64 `json:"client_items_max"`
}

// clientItems records one client's item count in the spread.
func (k *kindReport) clientItems(i int, n int64) {
	if i == 0 || n < k.ClientItemsMin {
		k.ClientItemsMin = n
	}
	k.ClientItemsMax = max(k.ClientItemsMax, n)
}

// runBench implements "reverie bench": load a server with inserts, samples
// or both, as in the Reverb paper's section 5 (one float32 tensor of
// random values per item, one step per item, chunks of one step), and
// report throughput and latency. It uses only the client package and the
// Reverb protocol, so it works against Reverb's server too.
func runBench(args []string) int {
	fs := flag.NewFlagSet("reverie bench", flag.ContinueOnError)
	var cfg benchConfig
	cfg.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		return parseStatus(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "reverie bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "reverie bench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The first signal ends the run (writers still flush, for up to a
	// minute); a second one stops the process at once, as by default.
	go func() {
		<-ctx.Done()
		stop()
	}()
	benchGC(os.Getenv)
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "reverie bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	rep, err := bench(ctx, &cfg, os.Stderr, isTerminal(os.Stderr))
	if err != nil {
		fmt.Fprintf(os.Stderr, "reverie bench: %v\n", err)
		return 1
	}
	if cfg.json {
		enc := json.NewEncoder(os.Stdout)
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(os.Stderr, "reverie bench: %v\n", err)
			return 1
		}
	} else {
		printBench(os.Stdout, rep)
	}
	if rep.Errors > 0 {
		return 1
	}
	return 0
}

// benchGCPercent is the GOGC of "reverie bench" when its environment sets
// none. The load generator's live heap is a few megabytes (samples in
// flight, payloads), so at Go's default of 100 it collects many times a
// second while sampling: at 500k samples/s of 400 B, a tenth of its CPU
// went to marking. A learner holding a model has a larger heap and
// collects less often. Collecting less lets the bench spend its CPU on
// load, which both servers it is run against get alike.
const benchGCPercent = 400

// benchGC sets the bench's GC percent to benchGCPercent, unless GOGC is
// set, and returns the percent in force.
func benchGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		old := debug.SetGCPercent(100)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(benchGCPercent)
	return benchGCPercent
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// bench runs the benchmark described by cfg. Failures of individual calls
// are counted (and the first few logged to errOut); only a server that
// cannot be reached or has no such table is an error.
func bench(ctx context.Context, cfg *benchConfig, errOut io.Writer, progress bool) (*benchReport, error) {
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	ctl, err := client.Dial(dctx, cfg.addr, cfg.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach %s within %v: %w", cfg.addr, cfg.timeout, err)
	}
	defer ctl.Close()
	tables, err := ctl.ServerInfo(dctx)
	if err != nil {
		return nil, fmt.Errorf("ServerInfo: %w", err)
	}
	ti, ok := tables[cfg.table]
	if !ok {
		var names []string
		for n := range tables {
			names = append(names, n)
		}
		return nil, fmt.Errorf("%s has no table %q (tables: %s)", cfg.addr, cfg.table, strings.Join(names, ", "))
	}

	rep := &benchReport{
		Mode: cfg.mode, Addr: cfg.addr, Table: cfg.table, PayloadBytes: cfg.payload,
		Compressible: cfg.compressible, ChunkLength: cfg.chunkLength, Clients: cfg.clients,
		InFlight: cfg.inFlight, ItemsLimit: cfg.items,
	}
	if cfg.items == 0 {
		rep.DurationSec = cfg.duration.Seconds()
	}
	writers, samplers := cfg.clients, 0
	switch cfg.mode {
	case "sample":
		writers, samplers = 0, cfg.clients
	case "mixed":
		writers, samplers = (cfg.clients+1)/2, cfg.clients/2
	}
	if samplers > 0 {
		if rep.Prefilled, err = prefill(ctx, ctl, cfg, ti); err != nil {
			return nil, fmt.Errorf("prefilling %q: %w", cfg.table, err)
		}
	}

	b := &benchRun{cfg: cfg, errOut: errOut}
	// One connection per client, dialled before the clock starts.
	wclients := make([]*client.Client, writers)
	trackers := make([]*insertTracker, writers)
	sclients := make([]*client.Client, samplers)
	defer func() {
		for _, c := range append(wclients, sclients...) {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range wclients {
		trackers[i] = newInsertTracker()
		opts := append(slices.Clip(cfg.dialOpts), client.WithDialOptions(grpc.WithStreamInterceptor(trackers[i].intercept)))
		if wclients[i], err = client.Dial(dctx, cfg.addr, opts...); err != nil {
			return nil, fmt.Errorf("connecting writer %d: %w", i, err)
		}
	}
	for i := range sclients {
		if sclients[i], err = client.Dial(dctx, cfg.addr, cfg.dialOpts...); err != nil {
			return nil, fmt.Errorf("connecting sampler %d: %w", i, err)
		}
	}

	runCtx, runCancel := ctx, context.CancelFunc(func() {})
	if cfg.items == 0 {
		runCtx, runCancel = context.WithTimeout(ctx, cfg.duration)
	}
	defer runCancel()

	wstats := make([]clientStats, writers)
	sstats := make([]clientStats, samplers)
	start := time.Now()
	var progWG sync.WaitGroup
	progDone := make(chan struct{})
	if progress {
		progWG.Go(func() { b.progress(start, trackers, sstats, progDone) })
	}

	var wg, writersWG sync.WaitGroup
	var insertEnd, sampleEnd atomic.Int64 // nanoseconds after start
	// In mixed mode the samplers keep draining the table (unmeasured)
	// until the writers' final flushes are done: a writer blocked on a
	// full queue would otherwise wait out its flush timeout.
	drainCtx, drainCancel := context.WithCancel(ctx)
	defer drainCancel()
	var flushMax atomic.Int64
	for i := range writers {
		writersWG.Go(func() {
			flush := b.writer(runCtx, wclients[i], trackers[i], i, &wstats[i])
			atomicMax(&flushMax, int64(flush))
			atomicMax(&insertEnd, int64(time.Since(start)))
		})
	}
	go func() {
		writersWG.Wait()
		drainCancel()
	}()
	for i := range samplers {
		quota := int64(0)
		if cfg.items > 0 {
			quota = cfg.items / int64(samplers)
			if int64(i) < cfg.items%int64(samplers) {
				quota++
			}
			if quota == 0 {
				continue
			}
		}
		wg.Go(func() {
			end := b.sampler(runCtx, drainCtx, sclients[i], i, quota, &sstats[i])
			atomicMax(&sampleEnd, int64(end.Sub(start)))
		})
	}
	writersWG.Wait()
	wg.Wait()
	close(progDone)
	progWG.Wait()

	if writers > 0 {
		kr := &kindReport{Clients: writers}
		h := &histogram{}
		for i, tr := range trackers {
			tr.mu.Lock()
			h.merge(&tr.hist)
			kr.clientItems(i, tr.hist.n)
			tr.mu.Unlock()
			kr.Errors += wstats[i].errors
		}
		kr.Items = h.n
		kr.Bytes = h.n * int64(cfg.payload)
		kr.FlushMs = durMs(time.Duration(flushMax.Load()))
		kr.fill(h, time.Duration(insertEnd.Load()))
		rep.Insert = kr
		rep.Latency.Insert = insertLatencyNote
	}
	if samplers > 0 {
		kr := &kindReport{Clients: samplers}
		h := &histogram{}
		for i := range sstats {
			h.merge(&sstats[i].hist)
			kr.clientItems(i, sstats[i].hist.n)
			kr.Errors += sstats[i].errors
			kr.Bytes += sstats[i].bytes
		}
		kr.Items = h.n
		kr.fill(h, time.Duration(sampleEnd.Load()))
		rep.Sample = kr
		rep.Latency.Sample = sampleLatencyNote
	}
	if rep.Insert != nil {
		rep.Errors += rep.Insert.Errors
	}
	if rep.Sample != nil {
		rep.Errors += rep.Sample.Errors
	}
	return rep, nil
}

func (k *kindReport) fill(h *histogram, elapsed time.Duration) {
	k.Seconds = elapsed.Seconds()
	if k.Seconds > 0 {
		k.ItemsPerSec = float64(k.Items) / k.Seconds
		k.MBPerSec = float64(k.Bytes) / k.Seconds / 1e6
	}
	k.P50Ms = durMs(h.quantile(0.5))
	k.P99Ms = durMs(h.quantile(0.99))
	k.P999Ms = durMs(h.quantile(0.999))
	k.MaxMs = durMs(h.max)
}

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func atomicMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// benchRun is the state shared by the clients of one run.
type benchRun struct {
	cfg     *benchConfig
	errOut  io.Writer
	claimed atomic.Int64 // items claimed by writers, with --items
	errs    atomic.Int64 // errors, for the progress line and the log limit
}

// clientStats are one client's figures; the client's goroutine owns them,
// but for sampled, which the progress line reads.
type clientStats struct {
	hist    histogram
	bytes   int64
	errors  int64
	sampled atomic.Int64 // samples returned, for the progress line
	// Clients' stats lie side by side in a slice and are written on
	// every item by goroutines on different cores: keep each on cache
	// lines of its own.
	_ [128]byte
}

// fail counts an error and logs the first few.
func (b *benchRun) fail(what string, err error) {
	if n := b.errs.Add(1); n <= 5 {
		fmt.Fprintf(b.errOut, "\nreverie bench: %s: %v\n", what, err)
	}
}

// payloads returns distinct payload tensors to cycle through: random
// float32 values (incompressible), or with --compressible a short repeated
// pattern. There are at least chunk-length of them, so that no chunk holds
// the same tensor twice.
func (b *benchRun) payloads(seed uint64) []client.Tensor {
	n := max(8, b.cfg.chunkLength)
	elems := b.cfg.payload / 4
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]client.Tensor, n)
	for i := range out {
		vals := make([]float32, elems)
		for j := range vals {
			if b.cfg.compressible {
				vals[j] = float32(j%4) * 0.25
			} else {
				vals[j] = r.Float32()
			}
		}
		if b.cfg.compressible {
			vals[0] = float32(i) // distinct items
		}
		out[i] = client.Vector(vals)
	}
	return out
}

// writer inserts items until ctx ends or, with --items, the writers have
// claimed them all; then it flushes and returns how long that took. On a
// failure it counts an error and starts over with a new TrajectoryWriter.
func (b *benchRun) writer(ctx context.Context, c *client.Client, tr *insertTracker, id int, st *clientStats) time.Duration {
	cfg := b.cfg
	payloads := b.payloads(uint64(id) + 1)
	opts := client.WriterOptions{NumKeepAliveRefs: cfg.chunkLength, ChunkLength: cfg.chunkLength, MaxInFlightItems: cfg.maxInFlight}
	what := fmt.Sprintf("writer %d", id)
	var w *client.TrajectoryWriter
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for i := 0; ctx.Err() == nil; i++ {
		if w == nil {
			var err error
			if w, err = c.NewTrajectoryWriter(ctx, opts); err != nil {
				st.errors++
				b.fail(what, err)
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
		}
		if cfg.items > 0 && b.claimed.Add(1) > cfg.items {
			break
		}
		start := tr.now()
		err := w.Append(ctx, map[string]client.Tensor{benchColumn: payloads[i%len(payloads)]})
		if err == nil {
			tr.push(start)
			if err = w.CreateItem(ctx, cfg.table, 1, []client.TrajectoryColumn{w.History(benchColumn).At(-1).Squeeze()}); err != nil {
				tr.unpush()
			}
		}
		if err != nil {
			if cfg.items > 0 {
				b.claimed.Add(-1)
			}
			if ctx.Err() != nil {
				break
			}
			st.errors++
			b.fail(what, err)
			w.Close()
			w = nil
			tr.reset()
		}
	}
	if w == nil {
		return 0
	}
	// Wait for the last confirmations, even if the run's ctx has ended.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	start := time.Now()
	if err := w.Flush(fctx); err != nil {
		st.errors++
		b.fail(what+": final flush", err)
	}
	return time.Since(start)
}

// sampler reads samples until ctx ends or, when quota > 0, quota samples
// were returned. Latency is the time of one Next call. After ctx ends it
// goes on taking samples, unmeasured, until drain ends (when the writers
// are done), unless it had a quota. It returns when its measured sampling
// ended.
func (b *benchRun) sampler(ctx, drain context.Context, c *client.Client, id int, quota int64, st *clientStats) time.Time {
	what := fmt.Sprintf("sampler %d", id)
	var s *client.Sampler
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	var got int64
	// Clock readings are offsets from base: time.Since reads only the
	// monotonic clock, where time.Now reads the wall clock too.
	base := time.Now()
	for ctx.Err() == nil && (quota == 0 || got < quota) {
		if s == nil {
			var err error
			s, err = c.NewSampler(client.SamplerOptions{
				Table:                       b.cfg.table,
				NumWorkers:                  1,
				MaxInFlightSamplesPerWorker: b.cfg.inFlight,
				MaxSamples:                  max(0, quota-got),
			})
			if err != nil {
				st.errors++
				b.fail(what, err)
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
		}
		start := time.Since(base)
		smp, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			st.errors++
			b.fail(what, err)
			s.Close()
			s = nil
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		st.hist.record(time.Since(base) - start)
		for _, col := range smp.Columns {
			st.bytes += col.TotalBytes()
		}
		got++
		st.sampled.Store(got)
	}
	end := time.Now()
	for quota == 0 && s != nil && drain.Err() == nil {
		if _, err := s.Next(drain); err != nil {
			break
		}
	}
	return end
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// progress rewrites one status line on the terminal every half second.
func (b *benchRun) progress(start time.Time, trackers []*insertTracker, sstats []clientStats, done <-chan struct{}) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			fmt.Fprint(b.errOut, "\r\033[K")
			return
		case <-tick.C:
		}
		el := time.Since(start).Seconds()
		var inserted int64
		for _, tr := range trackers {
			inserted += tr.confirmed.Load()
		}
		line := fmt.Sprintf("%5.1fs", el)
		if len(trackers) > 0 {
			line += fmt.Sprintf("  inserted %d (%.0f/s)", inserted, float64(inserted)/el)
		}
		if b.cfg.mode != "insert" {
			var n int64
			for i := range sstats {
				n += sstats[i].sampled.Load()
			}
			line += fmt.Sprintf("  sampled %d (%.0f/s)", n, float64(n)/el)
		}
		line += fmt.Sprintf("  errors %d", b.errs.Load())
		fmt.Fprintf(b.errOut, "\r\033[K%s", line)
	}
}

// prefill inserts items into the table until it holds enough to sample:
// at least its min_size_to_sample, and up to 1000 items or 64 MB of
// payload (within max_size). The items are not counted. It returns how
// many it inserted.
func prefill(ctx context.Context, c *client.Client, cfg *benchConfig, ti client.TableInfo) (int64, error) {
	target := int64(max(1, min(1000, (64<<20)/cfg.payload)))
	target = max(target, ti.RateLimiter.GetMinSizeToSample())
	target = min(target, ti.MaxSize)
	n := target - ti.CurrentSize
	if n <= 0 {
		return 0, nil
	}
	b := &benchRun{cfg: cfg}
	payloads := b.payloads(0)
	w, err := c.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1, ChunkLength: 1, MaxInFlightItems: cfg.maxInFlight})
	if err != nil {
		return 0, err
	}
	defer w.Close()
	for i := range n {
		if err := w.Append(ctx, map[string]client.Tensor{benchColumn: payloads[int(i)%len(payloads)]}); err != nil {
			return 0, err
		}
		if err := w.CreateItem(ctx, cfg.table, 1, []client.TrajectoryColumn{w.History(benchColumn).At(-1).Squeeze()}); err != nil {
			return 0, err
		}
	}
	if err := w.Flush(ctx); err != nil {
		return 0, err
	}
	return n, nil
}

// insertTracker measures each item's latency from the start of its Append
// to its confirmation. It sees the confirmations of a writer's insert
// streams through a gRPC interceptor on the writer's own connection. A
// stream confirms its items in order, so the k-th confirmed key belongs to
// the oldest unconfirmed item; a writer re-sends unconfirmed items on a new
// stream after a failure, which keeps that order.
type insertTracker struct {
	confirmed atomic.Int64 // for the progress line

	// Times are offsets from base (monotonic clock readings only).
	base    time.Time
	mu      sync.Mutex
	started []time.Duration // start times of unconfirmed items, oldest first
	hist    histogram
}

func newInsertTracker() *insertTracker { return &insertTracker{base: time.Now()} }

// now returns the time as an offset from base.
func (tr *insertTracker) now() time.Duration { return time.Since(tr.base) }

func (tr *insertTracker) push(t time.Duration) {
	tr.mu.Lock()
	tr.started = append(tr.started, t)
	tr.mu.Unlock()
}

// unpush drops the newest start time, of an item that was not created.
// No confirmation can have taken it: the item never reached the writer.
func (tr *insertTracker) unpush() {
	tr.mu.Lock()
	tr.started = tr.started[:len(tr.started)-1]
	tr.mu.Unlock()
}

// reset forgets the unconfirmed items of a writer that was closed.
func (tr *insertTracker) reset() {
	tr.mu.Lock()
	tr.started = tr.started[:0]
	tr.mu.Unlock()
}

func (tr *insertTracker) confirm(n int) {
	now := tr.now()
	tr.mu.Lock()
	n = min(n, len(tr.started))
	for _, t := range tr.started[:n] {
		tr.hist.record(now - t)
	}
	tr.started = append(tr.started[:0], tr.started[n:]...)
	tr.mu.Unlock()
	tr.confirmed.Add(int64(n))
}

func (tr *insertTracker) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/InsertStream") {
		return cs, err
	}
	return &trackedStream{ClientStream: cs, tr: tr}, nil
}

// trackedStream reports the keys an insert stream confirms.
type trackedStream struct {
	grpc.ClientStream
	tr *insertTracker
}

func (s *trackedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		if r, ok := m.(interface{ GetKeys() []uint64 }); ok {
			s.tr.confirm(len(r.GetKeys()))
		}
	}
	return err
}

// histogram counts durations in buckets under 1% wide, so that quantiles
// are within 1% of the truth in constant memory.
type histogram struct {
	counts   []int64
	n        int64
	min, max time.Duration
}

// Buckets are log-linear: durations below 2^histBits ns have a bucket
// each; above, each power of two is split into 2^histBits buckets (under
// 0.8% wide). Finding one takes a few integer instructions instead of a
// logarithm, which was recorded once per sample at 500k samples a second.
const histBits = 7

func histBucket(d time.Duration) int {
	x := uint64(max(d, 1))
	e := bits.Len64(x) - 1
	if e < histBits {
		return int(x)
	}
	return (e-histBits+1)<<histBits | int(x>>(e-histBits))&(1<<histBits-1)
}

// histLow returns the smallest duration in bucket i.
func histLow(i int) time.Duration {
	if i < 1<<histBits {
		return time.Duration(i)
	}
	e := i>>histBits + histBits - 1
	return time.Duration((1<<histBits | uint64(i)&(1<<histBits-1)) << (e - histBits))
}

func (h *histogram) record(d time.Duration) {
	d = max(d, 1)
	i := histBucket(d)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.n++
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]int64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
}

// quantile returns the duration below which a fraction q of the recorded
// durations lie (the middle of its bucket, within [min, max]); 0 when
// nothing was recorded.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(int64(math.Ceil(q*float64(h.n))), 1)
	var cum int64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			d := (histLow(i) + histLow(i+1)) / 2
			return min(max(d, h.min), h.max)
		}
	}
	return h.max
}

// fmtMs formats milliseconds as a duration with about three significant
// digits: 812ns, 12.3µs, 2.52ms, 1.20s.
func fmtMs(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", ms)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// printBench writes the report as text.
func printBench(out io.Writer, r *benchReport) {
	run := fmt.Sprintf("%v", time.Duration(r.DurationSec*float64(time.Second)))
	if r.ItemsLimit > 0 {
		run = fmt.Sprintf("%d items", r.ItemsLimit)
	}
	kind := "random"
	if r.Compressible {
		kind = "compressible"
	}
	fmt.Fprintf(out, "reverie bench: %s on %s table %q, %d client(s), %s, payload %d B (%s float32), chunk length %d\n",
		r.Mode, r.Addr, r.Table, r.Clients, run, r.PayloadBytes, kind, r.ChunkLength)
	if r.Prefilled > 0 {
		fmt.Fprintf(out, "prefilled %d items (not counted)\n", r.Prefilled)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tclients\titems\tper client\tseconds\titems/s\tMB/s\tp50\tp99\tp999\tmax\terrors\t")
	for _, k := range []struct {
		name string
		r    *kindReport
	}{{"insert", r.Insert}, {"sample", r.Sample}} {
		if k.r == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d-%d\t%.2f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%d\t\n", k.name, k.r.Clients, k.r.Items,
			k.r.ClientItemsMin, k.r.ClientItemsMax, k.r.Seconds,
			k.r.ItemsPerSec, k.r.MBPerSec, fmtMs(k.r.P50Ms), fmtMs(k.r.P99Ms), fmtMs(k.r.P999Ms), fmtMs(k.r.MaxMs), k.r.Errors)
	}
	tw.Flush()
	fmt.Fprintln(out)
	if r.Insert != nil {
		fmt.Fprintf(out, "insert latency: %s; final flush %.1f ms\n", insertLatencyNote, r.Insert.FlushMs)
	}
	if r.Sample != nil {
		fmt.Fprintf(out, "sample latency: %s\n", sampleLatencyNote)
	}
}
