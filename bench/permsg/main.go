// Command permsg inserts items with the request pattern of dm-reverb's
// TrajectoryWriter at low batching: every item is its own
// InsertStreamRequest (one chunk of one step, one item referencing it,
// keep_chunk_keys naming the chunk), each writer keeps at most --in-flight
// items unconfirmed, and all writers' streams share one connection, as the
// dm-reverb clients of one process share one gRPC subchannel. It measures
// what a request costs a server, which `reverie bench` (whose writers pack
// many items into a request) does not, without the dm-reverb client's own
// limit: one Python process of it tops out near 35k inserts/s, held by the
// interpreter lock.
//
// Requests are one template whose keys change from item to item, so the
// client's own cost per item is small. With --rate the writers offer a
// fixed load (items/s in all), the regime of actors that step
// environments; without it they send as fast as confirmations allow.
//
//	permsg --addr 127.0.0.1:8000 --table t --payload 400 --writers 8 \
//	    --duration 3s [--rate 20000] [--server-pid PID] [--json]
//
// Latency is per item: from just before its request is sent to the
// arrival of the response confirming it. With --server-pid the server's
// CPU time (utime+stime from /proc/PID/stat, around the run) is reported
// per item.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type options struct {
	addr, table string
	payload     int
	writers     int
	conns       int
	inFlight    int
	rate        float64
	duration    time.Duration
	serverPID   int
	sequential  bool
}

type report struct {
	Writers       int     `json:"writers"`
	Conns         int     `json:"connections"`
	PayloadBytes  int     `json:"payload_bytes"`
	InFlight      int     `json:"in_flight"`
	OfferedPerSec float64 `json:"offered_per_sec"` // 0: unpaced
	Items         int64   `json:"items"`
	Seconds       float64 `json:"seconds"`
	ItemsPerSec   float64 `json:"items_per_sec"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	// ServerCPUUsPerItem is 0 without --server-pid.
	ServerCPUUsPerItem float64 `json:"server_cpu_us_per_item"`
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8000", "server address")
	flag.StringVar(&o.table, "table", "replay", "table to insert into")
	flag.IntVar(&o.payload, "payload", 400, "payload bytes per item: one float32 tensor of payload/4 elements")
	flag.IntVar(&o.writers, "writers", 8, "concurrent insert streams")
	flag.IntVar(&o.conns, "conns", 1, "connections the streams are spread over")
	flag.IntVar(&o.inFlight, "in-flight", 48, "unconfirmed items per writer (the dm-reverb bench driver keeps 48)")
	flag.Float64Var(&o.rate, "rate", 0, "items/s offered in all, spread evenly over the writers (0: as fast as confirmations allow)")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "how long to insert")
	flag.IntVar(&o.serverPID, "server-pid", 0, "report this process's CPU time per item, from /proc")
	keys := flag.String("keys", "random", "item and chunk keys: random (as dm-reverb's clients make them) or sequential (base+1, base+2, ... per writer)")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400) // as in reverie bench: a load generator's heap is small
	}
	if o.payload < 4 || o.writers < 1 || o.conns < 1 || o.inFlight < 1 || o.rate < 0 || o.duration <= 0 {
		fmt.Fprintln(os.Stderr, "permsg: --payload must be at least 4, --writers, --conns, --in-flight and --duration positive, --rate not negative")
		os.Exit(2)
	}
	switch *keys {
	case "random":
	case "sequential":
		o.sequential = true
	default:
		fmt.Fprintf(os.Stderr, "permsg: --keys must be random or sequential, not %q\n", *keys)
		os.Exit(2)
	}
	rep, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "permsg:", err)
		os.Exit(1)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(rep)
		return
	}
	fmt.Printf("permsg: %d writers on %d connection(s), %d B, %d in flight: %d items in %.2f s, %.0f items/s, p50 %.3f ms, p99 %.3f ms",
		rep.Writers, rep.Conns, rep.PayloadBytes, rep.InFlight, rep.Items, rep.Seconds, rep.ItemsPerSec, rep.P50Ms, rep.P99Ms)
	if o.serverPID > 0 {
		fmt.Printf(", server %.2f µs CPU/item", rep.ServerCPUUsPerItem)
	}
	fmt.Println()
}

// requests makes one writer's requests from a template: only the keys and
// the sequence range change from one item to the next.
type requests struct {
	req   *reverbpb.InsertStreamRequest
	chunk *reverbpb.ChunkData
	// sequential: keys are base+1, base+2, ...; otherwise random, as
	// dm-reverb's clients choose them.
	sequential bool
	base       uint64
}

func newRequests(table string, payload, w int, sequential bool) (*requests, error) {
	vals := make([]float32, payload/4)
	for i := range vals {
		vals[i] = rand.Float32()
	}
	t, err := client.FromSlice(vals, 1, int64(len(vals)))
	if err != nil {
		return nil, err
	}
	chunk, err := client.EncodeChunk(1, &reverbpb.SequenceRange{EpisodeId: uint64(w)}, []client.Tensor{t}, false)
	if err != nil {
		return nil, err
	}
	req := &reverbpb.InsertStreamRequest{
		Chunks: []*reverbpb.ChunkData{chunk},
		Items: []*reverbpb.PrioritizedItem{{
			Table:    table,
			Priority: 1,
			FlatTrajectory: &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{
				ChunkSlices: []*reverbpb.FlatTrajectory_ChunkSlice{{Length: 1}},
				Squeeze:     true,
			}}},
		}},
		KeepChunkKeys: []uint64{0},
	}
	// A random base in the top 31 bits keeps sequential keys unique
	// across writers and across runs against one server (a repeated key
	// would update an item instead of inserting one).
	return &requests{req: req, chunk: chunk, sequential: sequential, base: rand.Uint64() >> 33 << 32}, nil
}

// next makes the template the i-th request and returns it; gRPC encodes
// it before Send returns, so the next call may change it.
func (r *requests) next(i int) *reverbpb.InsertStreamRequest {
	key := r.base + uint64(i+1)
	if !r.sequential {
		key = rand.Uint64()
	}
	r.chunk.ChunkKey = key
	r.chunk.SequenceRange.Start, r.chunk.SequenceRange.End = int32(i), int32(i)
	it := r.req.Items[0]
	it.Key = key
	it.FlatTrajectory.Columns[0].ChunkSlices[0].ChunkKey = key
	r.req.KeepChunkKeys[0] = key
	return r.req
}

// cpuTicks returns utime+stime of process pid, in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which may hold spaces: state is
	// the first, utime the 12th and stime the 13th.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	s, err := strconv.ParseInt(f[12], 10, 64)
	return u + s, err
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

func run(o options) (*report, error) {
	reqs := make([]*requests, o.writers)
	for w := range reqs {
		var err error
		if reqs[w], err = newRequests(o.table, o.payload, w, o.sequential); err != nil {
			return nil, err
		}
	}
	conns := make([]*grpc.ClientConn, o.conns)
	for i := range conns {
		c, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		conns[i] = c
	}
	var t0 int64
	if o.serverPID > 0 {
		var err error
		if t0, err = cpuTicks(o.serverPID); err != nil {
			return nil, err
		}
	}
	// Writers give up 30 s after the end: a server that stops confirming
	// fails the run instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), o.duration+30*time.Second)
	defer cancel()
	var every time.Duration
	if o.rate > 0 {
		every = time.Duration(float64(o.writers) / o.rate * float64(time.Second))
	}
	start := time.Now()
	lats := make([][]time.Duration, o.writers)
	errs := make([]error, o.writers)
	var wg sync.WaitGroup
	for w := range o.writers {
		wg.Go(func() {
			lats[w], errs[w] = writer(ctx, reverbpb.NewReverbServiceClient(conns[w%len(conns)]), reqs[w], o.inFlight, start, every, start.Add(o.duration))
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	rep := &report{
		Writers: o.writers, Conns: o.conns, PayloadBytes: o.payload / 4 * 4, InFlight: o.inFlight,
		OfferedPerSec: o.rate, Items: int64(len(all)), Seconds: secs,
		ItemsPerSec: float64(len(all)) / secs,
		P50Ms:       ms(quantile(all, 0.50)),
		P99Ms:       ms(quantile(all, 0.99)),
	}
	if o.serverPID > 0 && len(all) > 0 {
		t1, err := cpuTicks(o.serverPID)
		if err != nil {
			return nil, err
		}
		rep.ServerCPUUsPerItem = float64(t1-t0) / clockTicks * 1e6 / float64(len(all))
	}
	return rep, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writer sends its requests until the deadline, keeping at most inFlight
// unconfirmed, then waits for the last confirmations and half-closes. It
// returns the latency of every confirmed item. With every > 0 the i-th
// request is sent no earlier than start + i*every.
func writer(ctx context.Context, c reverbpb.ReverbServiceClient, reqs *requests, inFlight int, start time.Time, every time.Duration, deadline time.Time) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream, and so the reader, on an early return
	st, err := c.InsertStream(ctx)
	if err != nil {
		return nil, err
	}
	// tokens bounds the unconfirmed items; sent holds the send time of
	// each, oldest first (a writer's items are confirmed in the order
	// sent).
	tokens := make(chan struct{}, inFlight)
	sent := make(chan time.Time, inFlight)
	var lat []time.Duration
	var confirmed atomic.Int64
	done := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- err
				return
			}
			now := time.Now()
			for range resp.Keys {
				select {
				case t := <-sent:
					lat = append(lat, now.Sub(t))
					<-tokens
				default:
					done <- fmt.Errorf("server confirmed more items than were sent (response of %d keys)", len(resp.Keys))
					return
				}
			}
			confirmed.Add(int64(len(resp.Keys)))
		}
	}()
	n := 0
	for ; time.Now().Before(deadline); n++ {
		if every > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(n) * every)))
		}
		req := reqs.next(n)
		select {
		case tokens <- struct{}{}:
			sent <- time.Now() // never blocks: no more times than tokens
		case err := <-done:
			return nil, fmt.Errorf("insert stream ended after %d items sent: %v", n, err)
		}
		if err := st.Send(req); err != nil {
			return nil, fmt.Errorf("sending item %d: %w", n, err)
		}
	}
	// Wait for every confirmation before half-closing, as dm-reverb's
	// writer flushes before it closes: Reverb's server ends a half-closed
	// stream as soon as no response is queued, dropping the confirmations
	// of items still being inserted (docs/compatibility.md).
	for range inFlight {
		select {
		case tokens <- struct{}{}:
		case err := <-done:
			return nil, fmt.Errorf("insert stream ended with %d of %d items confirmed: %v", confirmed.Load(), n, err)
		}
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	if err := <-done; err != nil {
		return nil, fmt.Errorf("insert stream: %w", err)
	}
	if got := confirmed.Load(); got != int64(n) {
		return nil, fmt.Errorf("%d items sent, %d confirmed", n, got)
	}
	return lat, nil
}
