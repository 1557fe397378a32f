// Command echo is the ceiling of the benchmarks in bench/: a bare gRPC
// streaming service that moves the same bytes as `reverie bench` (random
// payloads of N bytes, one per message) with no table, no chunk encoding
// and no compression.
//
//	echo serve [--listen 127.0.0.1:0] [--rings SIZE:SLOTS,... [--keep]]
//	    [--read-buffer BYTES] [--raw | --h2 [--handoff]] [--ack-every N]
//	                                        prints port=N, serves until SIGTERM
//	echo load --addr 127.0.0.1:N --mode insert|sample --payload 400 \
//	    --clients 8 --duration 2s [--json] [--raw]
//
// With --raw on both, the same flows run over plain TCP with no gRPC
// (raw.go): holding a table, the floor of any transport here. With --h2,
// `echo serve` answers the same gRPC calls as without, to the same
// client, from an HTTP/2 server of its own instead of gRPC-Go's (h2.go).
//
// insert: each client sends payloads on one stream, with up to
// --max-in-flight-items (128, as the Go writer) unacknowledged; the server
// acknowledges each message with an 8-byte count of those it has taken (or
// every --ack-every messages, as a replay server confirms items in
// batches). Latency: from the send of a payload to its acknowledgement.
//
// sample: each client asks for --in-flight (16, as `reverie bench`)
// payloads at a time, which arrive in one message, and asks again once they
// have; a consumer takes them from a buffer, as from a Sampler. Latency:
// one take.
//
// Payloads are sent without copying them into the message and received
// with one copy out of gRPC's buffers (codec.go), as reverie's client and
// server move chunk bytes.
//
// With --rings the server holds a ring of SLOTS payloads of SIZE bytes,
// as much memory as a full replay table of such items: it copies each
// inserted payload into the ring and makes sample responses of payloads
// picked from it at random (ring.go). Payloads of other sizes are moved as
// above. With --keep it copies nothing: each inserted payload stays in the
// buffers gRPC's transport read it into, and those are held in the ring
// until the slot is overwritten. --read-buffer sets gRPC's read buffer
// (32 KiB, gRPC's default and reverie's; 0 reads each frame straight from
// the socket into its own buffer).
//
// The JSON report has the fields of `reverie bench --json`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/reverie-rl/reverie/internal/bufpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const serviceName = "reverie.bench.Echo"

// The service: Up takes payloads and acknowledges each; Down answers a
// request size<<16|n with one message of n payloads of size bytes (random,
// made once per size and n), as a replay server may pack the samples of a
// request into one response.

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{
		{StreamName: "Up", Handler: upHandler, ServerStreams: true, ClientStreams: true},
		{StreamName: "Down", Handler: downHandler, ServerStreams: true, ClientStreams: true},
	},
}

// echoServer is the service's state: the rings, if any (ring.go), and how
// many payloads an Up stream takes per acknowledgement.
type echoServer struct {
	rings    rings
	ackEvery uint64
}

func upHandler(srv any, st grpc.ServerStream) error {
	every := srv.(*echoServer).ackEvery
	var n uint64
	for {
		in := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(in); err != nil {
			if errors.Is(err, io.EOF) && n%every != 0 {
				return st.SendMsg(wrapperspb.UInt64(n)) // the rest
			} else if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n++
		if n%every == 0 {
			if err := st.SendMsg(wrapperspb.UInt64(n)); err != nil {
				return err
			}
		}
	}
}

var payloadCache sync.Map // request -> *wrapperspb.BytesValue

func downHandler(srv any, st grpc.ServerStream) error {
	rs := srv.(*echoServer).rings
	for {
		req := new(wrapperspb.UInt64Value)
		if err := st.RecvMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if r := rs[int(req.GetValue()>>16)]; r != nil {
			n := int(req.GetValue() & 0xffff)
			p := &pieces{parts: make([][]byte, 0, n)}
			for range n {
				p.parts = r.pickParts(p.parts)
			}
			if err := st.SendMsg(p); err != nil {
				return err
			}
			continue
		}
		out, ok := payloadCache.Load(req.GetValue())
		if !ok {
			size, n := int(req.GetValue()>>16), int(req.GetValue()&0xffff)
			out, _ = payloadCache.LoadOrStore(req.GetValue(), wrapperspb.Bytes(randomBytes(size*n, 1)))
		}
		if err := st.SendMsg(out); err != nil {
			return err
		}
	}
}

func serve(args []string) int {
	fs := flag.NewFlagSet("echo serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	ringSpec := fs.String("rings", "", "SIZE:SLOTS,...: hold SLOTS payloads of SIZE bytes, as a full replay table does (ring.go)")
	keep := fs.Bool("keep", false, "with --rings: keep inserted payloads in the buffers gRPC read them into, instead of copying them")
	readBuf := fs.Int("read-buffer", 32<<10, "gRPC's read buffer in bytes; 0 reads frames straight from the socket")
	raw := fs.Bool("raw", false, "serve plain TCP instead of gRPC: the floor of any transport (raw.go)")
	h2 := fs.Bool("h2", false, "serve gRPC on an HTTP/2 server of the echo's own instead of gRPC-Go's (h2.go)")
	handoff := fs.Bool("handoff", false, "with --h2: answer each stream on a goroutine of its own, and write on another (h2.go)")
	ackEvery := fs.Uint64("ack-every", 1, "acknowledge inserted payloads in batches of this many (at most the load's --max-in-flight-items)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *ackEvery < 1 {
		fmt.Fprintln(os.Stderr, "echo serve: --ack-every: want at least 1")
		return 2
	}
	if (*raw || *h2) && *keep {
		fmt.Fprintln(os.Stderr, "echo serve: --keep keeps gRPC-Go's buffers; --raw and --h2 have none")
		return 2
	}
	if *handoff && !*h2 {
		fmt.Fprintln(os.Stderr, "echo serve: --handoff is a mode of --h2")
		return 2
	}
	if *raw && *h2 {
		fmt.Fprintln(os.Stderr, "echo serve: --raw and --h2 are two different servers; pick one")
		return 2
	}
	rs, err := parseRings(*ringSpec, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo serve:", err)
		return 2
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo serve:", err)
		return 1
	}
	if *raw || *h2 {
		fmt.Printf("port=%d\n", lis.Addr().(*net.TCPAddr).Port)
		onSignal(func() { lis.Close() })
		var err error
		if *raw {
			err = serveRaw(lis, rs, *ackEvery)
		} else {
			err = serveH2(lis, rs, *ackEvery, *readBuf, *handoff, nil)
		}
		if !errors.Is(err, net.ErrClosed) {
			fmt.Fprintln(os.Stderr, "echo serve:", err)
			return 1
		}
		return 0
	}
	// The transport settings of reverie's server (server/server.go) that
	// bear on moving bytes, so that the echo stays the ceiling: read
	// buffers that are not zeroed, and writes gathered in 1 MiB bursts.
	s := grpc.NewServer(grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.ForceServerCodecV2(newBytesCodec(rs)),
		experimental.BufferPool(&bufpool.Pool{}),
		grpc.WriteBufferSize(1<<20), grpc.ReadBufferSize(*readBuf))
	s.RegisterService(&serviceDesc, &echoServer{rings: rs, ackEvery: *ackEvery})
	fmt.Printf("port=%d\n", lis.Addr().(*net.TCPAddr).Port)
	onSignal(s.Stop)
	if err := s.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "echo serve:", err)
		return 1
	}
	return 0
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// kindReport and report have the JSON fields of `reverie bench --json`.
type kindReport struct {
	Clients     int     `json:"clients"`
	Items       int64   `json:"items"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	ItemsPerSec float64 `json:"items_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	Errors      int64   `json:"errors"`
}

type report struct {
	Mode         string      `json:"mode"`
	Addr         string      `json:"addr"`
	PayloadBytes int         `json:"payload_bytes"`
	Clients      int         `json:"clients"`
	InFlight     int         `json:"in_flight"`
	DurationSec  float64     `json:"duration_sec"`
	Insert       *kindReport `json:"insert,omitempty"`
	Sample       *kindReport `json:"sample,omitempty"`
	Errors       int64       `json:"errors"`
}

type loadConfig struct {
	addr        string
	mode        string
	payload     int
	clients     int
	duration    time.Duration
	inFlight    int
	maxInFlight int
	json        bool
	raw         bool

	// progress, if set, is called after each payload acknowledged or
	// taken, from the flow's own goroutine. Tests end a run by it once
	// every flow has made progress, not at a fixed time.
	progress func()
}

func load(args []string) int {
	fs := flag.NewFlagSet("echo load", flag.ContinueOnError)
	var c loadConfig
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8000", "echo server address")
	fs.StringVar(&c.mode, "mode", "insert", "insert or sample")
	fs.IntVar(&c.payload, "payload", 400, "payload bytes per item")
	fs.IntVar(&c.clients, "clients", 1, "concurrent clients, each with its own connection")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "how long to generate load")
	fs.IntVar(&c.inFlight, "in-flight", 16, "sample: payloads requested at a time per client (< 65536)")
	fs.IntVar(&c.maxInFlight, "max-in-flight-items", 128, "insert: unacknowledged payloads per client")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.BoolVar(&c.raw, "raw", false, "drive an `echo serve --raw` (plain TCP, raw.go)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.mode != "insert" && c.mode != "sample" {
		fmt.Fprintln(os.Stderr, "echo load: --mode: want insert or sample")
		return 2
	}
	rep, err := runLoad(&c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo load:", err)
		return 1
	}
	if c.json {
		json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		k := rep.Insert
		if k == nil {
			k = rep.Sample
		}
		fmt.Printf("%s %d B x %d clients: %.0f items/s, %.1f MB/s, p50 %.3f ms, p99 %.3f ms\n",
			rep.Mode, rep.PayloadBytes, rep.Clients, k.ItemsPerSec, k.MBPerSec, k.P50Ms, k.P99Ms)
	}
	if rep.Errors > 0 {
		return 1
	}
	return 0
}

func runLoad(c *loadConfig) (*report, error) {
	conns := make([]*grpc.ClientConn, c.clients)
	for i := range conns {
		if c.raw {
			break // each client dials its own connection (raw.go)
		}
		cc, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32),
				grpc.ForceCodecV2(newBytesCodec(nil))))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		conns[i] = cc
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	lat := make([][]time.Duration, c.clients)
	errs := make([]error, c.clients)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			switch {
			case c.raw && c.mode == "insert":
				lat[i], errs[i] = rawUpClient(ctx, c, uint64(i)+1)
			case c.raw:
				lat[i], errs[i] = rawDownClient(ctx, c)
			case c.mode == "insert":
				lat[i], errs[i] = upClient(ctx, conns[i], c, uint64(i)+1)
			default:
				lat[i], errs[i] = downClient(ctx, conns[i], c)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep := &report{Mode: c.mode, Addr: c.addr, PayloadBytes: c.payload, Clients: c.clients, InFlight: c.inFlight, DurationSec: c.duration.Seconds()}
	var all []time.Duration
	k := &kindReport{Clients: c.clients}
	for i := range lat {
		all = append(all, lat[i]...)
		if errs[i] != nil {
			k.Errors++
			fmt.Fprintf(os.Stderr, "echo load: client %d: %v\n", i, errs[i])
		}
	}
	k.Items = int64(len(all))
	k.Bytes = k.Items * int64(c.payload)
	k.Seconds = elapsed.Seconds()
	k.ItemsPerSec = float64(k.Items) / k.Seconds
	k.MBPerSec = float64(k.Bytes) / k.Seconds / 1e6
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	k.P50Ms, k.P99Ms, k.P999Ms = quantileMs(all, 0.5), quantileMs(all, 0.99), quantileMs(all, 0.999)
	if len(all) > 0 {
		k.MaxMs = ms(all[len(all)-1])
	}
	rep.Errors = k.Errors
	if c.mode == "insert" {
		rep.Insert = k
	} else {
		rep.Sample = k
	}
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := max(int(math.Ceil(q*float64(len(sorted))))-1, 0)
	return ms(sorted[i])
}

var (
	upDesc   = &grpc.StreamDesc{StreamName: "Up", ServerStreams: true, ClientStreams: true}
	downDesc = &grpc.StreamDesc{StreamName: "Down", ServerStreams: true, ClientStreams: true}
)

// upClient sends payloads until ctx ends with at most maxInFlight
// unacknowledged, then waits for the last acknowledgements.
func upClient(ctx context.Context, cc *grpc.ClientConn, c *loadConfig, seed uint64) ([]time.Duration, error) {
	st, err := cc.NewStream(context.WithoutCancel(ctx), upDesc, "/"+serviceName+"/Up")
	if err != nil {
		return nil, err
	}
	payloads := make([]*wrapperspb.BytesValue, 8)
	for i := range payloads {
		payloads[i] = wrapperspb.Bytes(randomBytes(c.payload, seed*100+uint64(i)))
	}
	return runUp(ctx, c,
		func(i int) error { return st.SendMsg(payloads[i%len(payloads)]) },
		func() (uint64, error) {
			m := new(wrapperspb.UInt64Value)
			err := st.RecvMsg(m)
			return m.GetValue(), err
		},
		func() { st.CloseSend() })
}

// runUp is the insert flow of both echoes: send(i) sends the i-th payload,
// at most c.maxInFlight unacknowledged, until ctx ends; closeSend then
// half-closes. recvAck returns the next acknowledgement, the running count
// of payloads the server has taken, or io.EOF once the server has ended
// the flow after acknowledging everything. runUp returns the latency of
// each acknowledged payload, and fails if a sent one never was.
func runUp(ctx context.Context, c *loadConfig, send func(int) error, recvAck func() (uint64, error), closeSend func()) ([]time.Duration, error) {
	sent := make(chan time.Time, c.maxInFlight) // start times of unacknowledged payloads
	var lat []time.Duration
	recvErr := make(chan error, 1)
	go func() {
		var acked uint64
		for {
			n, err := recvAck()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				recvErr <- err
				return
			}
			for ; acked < n; acked++ {
				t, ok := <-sent
				if !ok {
					recvErr <- fmt.Errorf("acknowledged %d payloads, sent %d", n, acked)
					return
				}
				lat = append(lat, time.Since(t))
				if c.progress != nil {
					c.progress()
				}
			}
		}
	}()
	var sendErr error
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case sent <- time.Now():
		case <-ctx.Done():
			continue
		case err := <-recvErr:
			return lat, err
		}
		if sendErr = send(i); sendErr != nil {
			break
		}
	}
	close(sent)
	closeSend()
	if err := <-recvErr; err != nil {
		return lat, err
	}
	if n := len(sent); n > 0 && sendErr == nil {
		return lat, fmt.Errorf("%d payloads sent were never acknowledged", n)
	}
	return lat, sendErr
}

// downClient asks for inFlight payloads at a time; a consumer takes them
// from a buffer and times each take.
func downClient(ctx context.Context, cc *grpc.ClientConn, c *loadConfig) ([]time.Duration, error) {
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cc.NewStream(sctx, downDesc, "/"+serviceName+"/Down")
	if err != nil {
		return nil, err
	}
	buf := make(chan int, c.inFlight)
	fetchErr := make(chan error, 1)
	go func() {
		defer close(buf)
		req := wrapperspb.UInt64(uint64(c.payload)<<16 | uint64(c.inFlight))
		for sctx.Err() == nil {
			if err := st.SendMsg(req); err != nil {
				fetchErr <- err
				return
			}
			m := new(wrapperspb.BytesValue)
			if err := st.RecvMsg(m); err != nil {
				if sctx.Err() == nil {
					fetchErr <- err
				}
				return
			}
			if len(m.GetValue()) != c.payload*c.inFlight {
				fetchErr <- fmt.Errorf("got %d bytes, want %d", len(m.GetValue()), c.payload*c.inFlight)
				return
			}
			if !offer(sctx, buf, c.inFlight, c.payload) {
				return
			}
		}
	}()
	return takeAll(ctx, c, buf, fetchErr)
}

// offer puts n payloads of size bytes into buf for the consumer, and
// reports whether it did before ctx ended.
func offer(ctx context.Context, buf chan<- int, n, size int) bool {
	for range n {
		select {
		case buf <- size:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// takeAll is the consumer of a sample flow: it takes payloads from buf
// until ctx ends or buf is closed, and times each take. A closed buf ends
// it with the fetcher's error, if any.
func takeAll(ctx context.Context, c *loadConfig, buf <-chan int, fetchErr <-chan error) ([]time.Duration, error) {
	var lat []time.Duration
	for ctx.Err() == nil {
		t := time.Now()
		select {
		case _, ok := <-buf:
			if !ok {
				select {
				case err := <-fetchErr:
					return lat, err
				default:
					return lat, nil
				}
			}
			lat = append(lat, time.Since(t))
			if c.progress != nil {
				c.progress()
			}
		case <-ctx.Done():
		}
	}
	return lat, nil
}

// onSignal calls f once, on the first SIGTERM or SIGINT.
func onSignal(f func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		f()
	}()
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: echo serve|load [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serve(os.Args[2:]))
	case "load":
		os.Exit(load(os.Args[2:]))
	}
	fmt.Fprintln(os.Stderr, "usage: echo serve|load [flags]")
	os.Exit(2)
}
