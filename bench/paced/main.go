// Command paced measures sample latency at a fixed offered load, for the
// "sample p99 at half saturation" comparison in bench/: --clients
// connections, each with one SampleStream, ask for --batch samples per
// request on a fixed schedule so that together they request --rate samples
// per second. A request's latency runs to the arrival of its last sample
// from its scheduled time (not its send time, so a server that falls
// behind is charged for the wait), or, when the client slept until that
// time, from when it woke: Go's timers on Linux wake a process that was
// idle up to about a millisecond late (time.Sleep of 0.2-1.8 ms overslept
// by 0.6 ms at the median and 1.1 ms at the 99th percentile on the
// development machine), and that lateness is the client's, not the
// server's. The report gives it as client_wake_late_p50_ms and _p99_ms.
// It speaks the Reverb protocol directly (api/reverbpb), so it works
// against Reverb's server too.
//
//	paced --addr 127.0.0.1:N --table replay --rate 50000 --batch 16 \
//	    --clients 8 --duration 3s --json
//
// The JSON report has the fields of `reverie bench --json` (a "sample"
// section); p50/p99 are per request of --batch samples.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

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
	Mode          string  `json:"mode"`
	Addr          string  `json:"addr"`
	Table         string  `json:"table"`
	Clients       int     `json:"clients"`
	Batch         int     `json:"batch"`
	OfferedPerSec float64 `json:"offered_items_per_sec"`
	DurationSec   float64 `json:"duration_sec"`
	Late          int64   `json:"late_requests"` // requests sent after their scheduled time
	// How late the client's timer woke it for the requests it slept
	// before (not counted in their latency).
	WakeLateP50Ms float64     `json:"client_wake_late_p50_ms"`
	WakeLateP99Ms float64     `json:"client_wake_late_p99_ms"`
	Sample        *kindReport `json:"sample"`
	Errors        int64       `json:"errors"`
	Latency       string      `json:"latency_definition"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8000", "server address")
	table := flag.String("table", "replay", "table to sample from")
	rate := flag.Float64("rate", 10000, "offered samples per second, all clients together")
	batch := flag.Int("batch", 16, "samples per request")
	clients := flag.Int("clients", 8, "connections, one stream each")
	duration := flag.Duration("duration", 3*time.Second, "how long to offer load")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this client to this file")
	flag.Parse()
	if os.Getenv("GOGC") == "" {
		// As in reverie bench: a load generator with a small live heap
		// would otherwise collect many times a second.
		debug.SetGCPercent(400)
	}
	if *rate <= 0 || *batch < 1 || *clients < 1 || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "paced: --rate, --batch, --clients and --duration must be positive")
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "paced: --cpuprofile:", err)
			os.Exit(2)
		}
		defer f.Close()
	}
	rep, err := run(*addr, *table, *rate, *batch, *clients, *duration)
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "paced:", err)
		os.Exit(1)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		s := rep.Sample
		fmt.Printf("offered %.0f/s, got %.0f items/s (%.1f MB/s), per request of %d: p50 %.3f ms, p99 %.3f ms, late %d; client timer late p50 %.3f ms, p99 %.3f ms\n",
			rep.OfferedPerSec, s.ItemsPerSec, s.MBPerSec, rep.Batch, s.P50Ms, s.P99Ms, rep.Late, rep.WakeLateP50Ms, rep.WakeLateP99Ms)
	}
	if rep.Errors > 0 {
		os.Exit(1)
	}
}

type clientResult struct {
	lat   []time.Duration
	wake  []time.Duration // how late each sleep ended
	items int64
	bytes int64
	late  int64
	err   error
}

func run(addr, table string, rate float64, batch, clients int, duration time.Duration) (*report, error) {
	conns := make([]*grpc.ClientConn, clients)
	for i := range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		conns[i] = cc
	}
	// Open every stream and take one request's worth before the clock
	// starts: connection set-up is not part of the measurement.
	streams := make([]reverbpb.ReverbService_SampleStreamClient, clients)
	counts := make([]responseCount, clients) // each stream's, with its scratch buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, cc := range conns {
		st, err := reverbpb.NewReverbServiceClient(cc).SampleStream(ctx, grpc.WaitForReady(true), grpc.ForceCodecV2(countCodec{}))
		if err != nil {
			return nil, err
		}
		if _, _, err := request(st, table, batch, &counts[i]); err != nil {
			return nil, fmt.Errorf("warm-up request: %w", err)
		}
		streams[i] = st
	}
	interval := time.Duration(float64(time.Second) * float64(batch*clients) / rate)
	results := make([]clientResult, clients)
	start := time.Now()
	end := start.Add(duration)
	var wg sync.WaitGroup
	for i, st := range streams {
		// Stagger the clients evenly over one interval.
		first := start.Add(interval * time.Duration(i) / time.Duration(clients))
		wg.Go(func() {
			r := &results[i]
			for k := 0; ; k++ {
				at := first.Add(interval * time.Duration(k))
				if !at.Before(end) {
					return
				}
				from := at
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
					from = time.Now()
					r.wake = append(r.wake, from.Sub(at))
				} else if d < -time.Millisecond {
					r.late++
				}
				n, b, err := request(st, table, batch, &counts[i])
				if err != nil {
					r.err = err
					return
				}
				r.lat = append(r.lat, time.Since(from))
				r.items += n
				r.bytes += b
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep := &report{Mode: "sample", Addr: addr, Table: table, Clients: clients, Batch: batch,
		OfferedPerSec: rate, DurationSec: duration.Seconds(),
		Latency: fmt.Sprintf("per request of %d samples: from its scheduled send time (or, if the client's timer woke it after that, from its wake-up) to its last sample", batch)}
	k := &kindReport{Clients: clients, Seconds: elapsed.Seconds()}
	var all, wake []time.Duration
	for i := range results {
		r := &results[i]
		all = append(all, r.lat...)
		wake = append(wake, r.wake...)
		k.Items += r.items
		k.Bytes += r.bytes
		rep.Late += r.late
		if r.err != nil {
			k.Errors++
			fmt.Fprintf(os.Stderr, "paced: client %d: %v\n", i, r.err)
		}
	}
	k.ItemsPerSec = float64(k.Items) / k.Seconds
	k.MBPerSec = float64(k.Bytes) / k.Seconds / 1e6
	k.P50Ms, k.P99Ms, k.P999Ms = quantile(all, 0.5), quantile(all, 0.99), quantile(all, 0.999)
	rep.WakeLateP50Ms, rep.WakeLateP99Ms = quantile(wake, 0.5), quantile(wake, 0.99)
	if len(all) > 0 {
		k.MaxMs = ms(all[len(all)-1]) // quantile sorted all
	}
	rep.Sample, rep.Errors = k, k.Errors
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile sorts ds and returns its p-quantile in milliseconds (0 if empty).
func quantile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ms(ds[max(int(math.Ceil(p*float64(len(ds))))-1, 0)])
}

// request asks for n samples on st and reads until the n-th is complete,
// counting each response into c. It returns the samples and the payload
// bytes (tensor contents of their chunks) received.
func request(st reverbpb.ReverbService_SampleStreamClient, table string, n int, c *responseCount) (int64, int64, error) {
	req := &reverbpb.SampleStreamRequest{Table: table, NumSamples: int64(n),
		RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: 10_000}}
	if err := st.Send(req); err != nil {
		return 0, 0, err
	}
	var got, bytes int64
	for got < int64(n) {
		if err := st.RecvMsg(c); err != nil {
			return got, bytes, err
		}
		got += c.samples
		bytes += c.bytes
	}
	return got, bytes, nil
}

// countCodec sends requests as protobuf and, rather than decoding
// responses into reverbpb messages, counts what they hold (see
// countResponse): the latency measured is the server's, and the client
// leaves the CPU it shares with the server to the server. Decoding every
// tensor cost this client 5-6 us per sample at 175k samples/s, as much
// CPU as the server it measured.
//
// It is a CodecV2 so that a response spread over several of the
// transport's buffers is joined into the stream's own scratch buffer,
// reused from one response to the next. With the older []byte interface
// gRPC-Go joins every response into fresh memory, and at 40 kB and 30k
// samples/s this client's small heap then collected about 75 times a
// second; gRPC-Go's pool would clear each 640 kB buffer it hands out.
type countCodec struct{}

func (countCodec) Name() string { return "proto" }

func (countCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("paced: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (countCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c, ok := v.(*responseCount)
	if !ok {
		return fmt.Errorf("paced: cannot unmarshal into %T", v)
	}
	if len(data) == 1 {
		return countResponse(data[0].ReadOnlyData(), c)
	}
	n := data.Len()
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	c.scratch = c.scratch[:n]
	data.CopyTo(c.scratch)
	return countResponse(c.scratch, c)
}

// responseCount is what a SampleStreamResponse holds: completed samples
// (entries with end_of_sequence) and the encoded size of its chunks'
// ChunkData.data, the payload bytes. scratch is the codec's buffer for
// joining a response, kept from one response to the next.
type responseCount struct {
	samples, bytes int64
	scratch        []byte
}

// Field numbers: SampleStreamResponse.entries, SampleEntry.data and
// .end_of_sequence, ChunkData.data.
const (
	responseEntries  = 1
	entryData        = 2
	entryEnd         = 3
	chunkDataTensors = 5
)

// countResponse counts a SampleStreamResponse in b into c. It walks every
// field of the response, its entries and their chunks, and rejects what
// does not parse, but does not look into infos or tensors.
func countResponse(b []byte, c *responseCount) error {
	c.samples, c.bytes = 0, 0
	return walk(b, "SampleStreamResponse", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		if num != responseEntries || typ != protowire.BytesType {
			return nil
		}
		end := false
		err := walk(v, "SampleEntry", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
			switch {
			case num == entryEnd && typ == protowire.VarintType:
				end = x != 0 // the last value of a singular field counts
			case num == entryData && typ == protowire.BytesType:
				return walk(v, "ChunkData", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
					if num == chunkDataTensors && typ == protowire.BytesType {
						c.bytes += int64(len(v))
					}
					return nil
				})
			}
			return nil
		})
		if end {
			c.samples++
		}
		return err
	})
}

// walk calls f with each field of the message in b: its number, wire
// type, and its value (bytes for length-delimited fields, x for varints).
func walk(b []byte, msg string, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("paced: bad %s: %w", msg, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("paced: bad %s field %d: %w", msg, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
