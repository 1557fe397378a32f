// Command prioritized is the prioritized-replay workload of bench/: a
// Prioritized table filled with transitions of Acme's shape (observation:
// 87 float32, action: 8 float32, reward and discount: float32 scalars,
// next_observation: 87 float32; 736 bytes an item), then sampled by a
// learner in batches of 256 with a MutatePriorities call after every batch,
// as in prioritized experience replay. It uses only reverie's Go client,
// so it runs against reverie and Reverb alike. The two phases run as
// separate invocations so that the harness can measure the server during
// each:
//
//	prioritized --phase insert --addr 127.0.0.1:N --table prioritized --items 1000000 --json
//	prioritized --phase sample --addr 127.0.0.1:N --table prioritized --duration 5s --json
//
// insert: --writers TrajectoryWriters, each item one step with a random
// priority in (0, 1]; latency is one Append+CreateItem call (it blocks
// when 128 items are unconfirmed), and the phase ends when every item is
// confirmed.
//
// sample: --learners learners, each with a Sampler of one worker asking for
// one batch per request; a learner takes a batch (Batches, columns
// stacked), then sets a new random priority for each of its keys with one
// MutatePriorities call. Latency is per batch: taking it plus the update.
//
// The JSON report has the fields of `reverie bench --json`; sample items
// are sampled transitions.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverie-rl/reverie/client"
)

const (
	obsDim    = 87
	actionDim = 8
	itemBytes = (2*obsDim + actionDim + 2) * 4
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
	// sample phase only
	Batches        int64   `json:"batches,omitempty"`
	UpdateP50Ms    float64 `json:"update_p50_ms,omitempty"`
	UpdateP99Ms    float64 `json:"update_p99_ms,omitempty"`
	PriorityUpdate int64   `json:"priority_updates,omitempty"`
}

type report struct {
	Mode         string      `json:"mode"`
	Phase        string      `json:"phase"`
	Addr         string      `json:"addr"`
	Table        string      `json:"table"`
	PayloadBytes int         `json:"payload_bytes"`
	Clients      int         `json:"clients"`
	BatchSize    int         `json:"batch_size,omitempty"`
	TableSize    int64       `json:"table_size"` // after the phase
	Insert       *kindReport `json:"insert,omitempty"`
	Sample       *kindReport `json:"sample,omitempty"`
	Errors       int64       `json:"errors"`
	Latency      string      `json:"latency_definition"`
}

type config struct {
	addr, table, phase string
	items              int64
	writers, learners  int
	batch              int
	duration           time.Duration
	json               bool
}

func main() {
	var c config
	flag.StringVar(&c.addr, "addr", "127.0.0.1:8000", "server address")
	flag.StringVar(&c.table, "table", "prioritized", "a table with a Prioritized sampler")
	flag.StringVar(&c.phase, "phase", "insert", "insert or sample")
	flag.Int64Var(&c.items, "items", 1_000_000, "insert: items to insert, all writers together")
	flag.IntVar(&c.writers, "writers", 4, "insert: concurrent writers, each with its own connection")
	flag.IntVar(&c.learners, "learners", 1, "sample: concurrent learners, each with its own connection")
	flag.IntVar(&c.batch, "batch", 256, "sample: batch size")
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "sample: how long to sample")
	flag.BoolVar(&c.json, "json", false, "print the report as JSON")
	flag.Parse()
	var rep *report
	var err error
	switch c.phase {
	case "insert":
		rep, err = insert(&c)
	case "sample":
		rep, err = sample(&c)
	default:
		err = fmt.Errorf("--phase: want insert or sample, got %q", c.phase)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prioritized:", err)
		os.Exit(1)
	}
	if info, err := tableSize(c.addr, c.table); err == nil {
		rep.TableSize = info
	}
	if c.json {
		json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		k := rep.Insert
		if k == nil {
			k = rep.Sample
		}
		fmt.Printf("%s: %d items in %.2fs: %.0f items/s, %.1f MB/s, p50 %.3f ms, p99 %.3f ms, table size %d\n",
			rep.Phase, k.Items, k.Seconds, k.ItemsPerSec, k.MBPerSec, k.P50Ms, k.P99Ms, rep.TableSize)
	}
	if rep.Errors > 0 {
		os.Exit(1)
	}
}

func dial(addr string) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Dial(ctx, addr)
}

func tableSize(addr, table string) (int64, error) {
	c, err := dial(addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	tables, err := c.ServerInfo(context.Background())
	if err != nil {
		return 0, err
	}
	return tables[table].CurrentSize, nil
}

func randVec(r *rand.Rand, n int) client.Tensor {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()
	}
	return client.Vector(v)
}

func insert(c *config) (*report, error) {
	clients := make([]*client.Client, c.writers)
	for i := range clients {
		cl, err := dial(c.addr)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		clients[i] = cl
	}
	var claimed atomic.Int64
	lat := make([][]time.Duration, c.writers)
	errs := make([]error, c.writers)
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Go(func() {
			lat[i], errs[i] = writer(ctx, cl, c, uint64(i)+1, &claimed)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	k := &kindReport{Clients: c.writers, Seconds: elapsed.Seconds()}
	var all []time.Duration
	for i := range lat {
		all = append(all, lat[i]...)
		if errs[i] != nil {
			k.Errors++
			fmt.Fprintf(os.Stderr, "prioritized: writer %d: %v\n", i, errs[i])
		}
	}
	k.Items = int64(len(all))
	if k.Errors > 0 {
		k.Items = 0 // unconfirmed
	}
	k.Bytes = k.Items * itemBytes
	fill(k, all)
	return &report{Mode: "prioritized", Phase: "insert", Addr: c.addr, Table: c.table, PayloadBytes: itemBytes,
		Clients: c.writers, Insert: k, Errors: k.Errors,
		Latency: "per item: one Append+CreateItem call (blocks while 128 items are unconfirmed); items/s counts until every writer's final Flush"}, nil
}

func writer(ctx context.Context, cl *client.Client, c *config, seed uint64, claimed *atomic.Int64) ([]time.Duration, error) {
	r := rand.New(rand.NewPCG(seed, 0xac3e))
	// A few distinct steps to cycle through; random contents.
	const nsteps = 16
	steps := make([]map[string]client.Tensor, nsteps)
	for i := range steps {
		steps[i] = map[string]client.Tensor{
			"observation":      randVec(r, obsDim),
			"action":           randVec(r, actionDim),
			"reward":           client.Scalar(r.Float32()),
			"discount":         client.Scalar(float32(0.99)),
			"next_observation": randVec(r, obsDim),
		}
	}
	w, err := cl.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1, ChunkLength: 1})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cols := []string{"observation", "action", "reward", "discount", "next_observation"}
	var lat []time.Duration
	for i := 0; claimed.Add(1) <= c.items; i++ {
		t := time.Now()
		if err := w.Append(ctx, steps[i%nsteps]); err != nil {
			return lat, err
		}
		traj := make([]client.TrajectoryColumn, len(cols))
		for j, name := range cols {
			traj[j] = w.History(name).At(-1).Squeeze()
		}
		if err := w.CreateItem(ctx, c.table, 1e-3+r.Float64(), traj); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(t))
	}
	return lat, w.Flush(ctx)
}

func sample(c *config) (*report, error) {
	clients := make([]*client.Client, c.learners)
	for i := range clients {
		cl, err := dial(c.addr)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		clients[i] = cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	type result struct {
		lat, upd       []time.Duration
		items, batches int64
		err            error
	}
	results := make([]result, c.learners)
	start := time.Now()
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Go(func() {
			res := &results[i]
			r := rand.New(rand.NewPCG(uint64(i)+1, 0x1ea))
			s, err := cl.NewSampler(client.SamplerOptions{Table: c.table, NumWorkers: 1, MaxInFlightSamplesPerWorker: c.batch})
			if err != nil {
				res.err = err
				return
			}
			defer s.Close()
			updates := make(map[uint64]float64, c.batch)
			t := time.Now()
			// The run ends at ctx's deadline; a call cut short by it is not
			// an error (gRPC may report the deadline a moment before ctx).
			ended := func(err error) bool { return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) }
			for b, err := range s.Batches(ctx, c.batch) {
				if err != nil {
					if !ended(err) {
						res.err = err
					}
					return
				}
				clear(updates)
				for _, info := range b.Infos {
					updates[info.Key] = 1e-3 + r.Float64()
				}
				u := time.Now()
				if err := cl.MutatePriorities(ctx, c.table, updates, nil); err != nil {
					if !ended(err) {
						res.err = err
					}
					return
				}
				now := time.Now()
				res.upd = append(res.upd, now.Sub(u))
				res.lat = append(res.lat, now.Sub(t))
				res.items += int64(len(b.Infos))
				res.batches++
				t = now
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	k := &kindReport{Clients: c.learners, Seconds: elapsed.Seconds()}
	var all, upd []time.Duration
	for i := range results {
		res := &results[i]
		all = append(all, res.lat...)
		upd = append(upd, res.upd...)
		k.Items += res.items
		k.Batches += res.batches
		if res.err != nil {
			k.Errors++
			fmt.Fprintf(os.Stderr, "prioritized: learner %d: %v\n", i, res.err)
		}
	}
	k.Bytes = k.Items * itemBytes
	k.PriorityUpdate = k.Items
	fill(k, all)
	sortDur(upd)
	k.UpdateP50Ms, k.UpdateP99Ms = quantileMs(upd, 0.5), quantileMs(upd, 0.99)
	return &report{Mode: "prioritized", Phase: "sample", Addr: c.addr, Table: c.table, PayloadBytes: itemBytes,
		Clients: c.learners, BatchSize: c.batch, Sample: k, Errors: k.Errors,
		Latency: fmt.Sprintf("per batch of %d: taking it from the Sampler (prefetched, one request per batch) plus one MutatePriorities call of its keys", c.batch)}, nil
}

func sortDur(d []time.Duration) { sort.Slice(d, func(a, b int) bool { return d[a] < d[b] }) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return ms(sorted[max(int(math.Ceil(q*float64(len(sorted))))-1, 0)])
}

func fill(k *kindReport, lat []time.Duration) {
	if k.Seconds > 0 {
		k.ItemsPerSec = float64(k.Items) / k.Seconds
		k.MBPerSec = float64(k.Bytes) / k.Seconds / 1e6
	}
	sortDur(lat)
	k.P50Ms, k.P99Ms, k.P999Ms = quantileMs(lat, 0.5), quantileMs(lat, 0.99), quantileMs(lat, 0.999)
	if len(lat) > 0 {
		k.MaxMs = ms(lat[len(lat)-1])
	}
}
