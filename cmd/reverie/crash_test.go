package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/api/tensorflowpb"
	"github.com/reverie-rl/reverie/internal/checkpoint"
	"google.golang.org/grpc"
)

// crashConfig is a durable server with one prioritized table that never
// evicts, so that every confirmed item must be there after a crash; a small
// checkpoint_after_bytes makes the server checkpoint and cut its log while
// the load runs.
const crashConfig = `
checkpoint_dir: %s
wal:
  fsync: %s
  interval: %s
  checkpoint_after_bytes: 262144
tables:
  - name: prio
    sampler: {prioritized: {priority_exponent: 1}}
    remover: fifo
    max_size: 10000000
    rate_limiter: {min_size: 1}
`

// ledger is what the clients know for sure: for each item whose insert
// was confirmed, the priorities it was acknowledged to have and when; the
// updates and deletes in flight; and the acknowledged deletes.
type ledger struct {
	mu       sync.Mutex
	hist     map[uint64][]acked // priorities acknowledged, oldest first
	updating map[uint64]float64 // update in flight: applied or not
	deleting map[uint64]bool    // delete in flight: applied or not
	deleted  map[uint64]acked   // acknowledged deletes (priority: the last one)
	total    int                // items ever confirmed
	killedAt time.Time          // when the server was last killed
}

// acked is a priority and when the server acknowledged it.
type acked struct {
	prio float64
	at   time.Time
}

func newLedger() *ledger {
	return &ledger{hist: map[uint64][]acked{}, updating: map[uint64]float64{},
		deleting: map[uint64]bool{}, deleted: map[uint64]acked{}}
}

// allowed lists the priorities item k may have after a crash: the last
// one acknowledged, and one in flight.
func (l *ledger) allowed(k uint64) []float64 {
	h := l.hist[k]
	prios := []float64{h[len(h)-1].prio}
	if p, ok := l.updating[k]; ok {
		prios = append(prios, p)
	}
	return prios
}

// crashLoad drives a server until ctx ends: writers inserting items whose
// chunks are shared by several items and kept across requests, an updater
// changing priorities and deleting items, and a sampler.
func crashLoad(ctx context.Context, conn *grpc.ClientConn, led *ledger, rng *rand.Rand, round int) *sync.WaitGroup {
	c := reverbpb.NewReverbServiceClient(conn)
	var wg sync.WaitGroup
	for w := range 4 {
		seed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			crashWriter(ctx, c, led, rand.New(rand.NewPCG(seed, 1)), uint64(round)<<40|uint64(w)<<32)
		}()
	}
	seed := rng.Uint64()
	wg.Add(2)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(seed, 2))
		for ctx.Err() == nil {
			led.mu.Lock()
			var key uint64
			for k := range led.hist { // map order is random enough
				_, busy := led.updating[k]
				if !busy && !led.deleting[k] {
					key = k
					break
				}
			}
			if key == 0 {
				led.mu.Unlock()
				time.Sleep(time.Millisecond)
				continue
			}
			del := r.IntN(5) == 0
			np := float64(1 + r.IntN(1000))
			req := &reverbpb.MutatePrioritiesRequest{Table: "prio"}
			if del {
				led.deleting[key] = true
				req.DeleteKeys = []uint64{key}
			} else {
				led.updating[key] = np
				req.Updates = []*reverbpb.KeyWithPriority{{Key: key, Priority: np}}
			}
			led.mu.Unlock()
			_, err := c.MutatePriorities(ctx, req)
			if err != nil {
				return // the server died: the outcome stays uncertain
			}
			now := time.Now()
			led.mu.Lock()
			if del {
				h := led.hist[key]
				led.deleted[key] = acked{h[len(h)-1].prio, now}
				delete(led.hist, key)
				delete(led.deleting, key)
			} else {
				led.hist[key] = append(led.hist[key], acked{np, now})
				delete(led.updating, key)
			}
			led.mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			st, err := c.SampleStream(ctx)
			if err != nil {
				return
			}
			if st.Send(&reverbpb.SampleStreamRequest{Table: "prio", NumSamples: 64,
				RateLimiterTimeout: &reverbpb.Timeout{Milliseconds: 100}}) != nil {
				return
			}
			for n := 0; n < 64; {
				resp, err := st.Recv()
				if err != nil {
					break
				}
				for _, e := range resp.GetEntries() {
					if e.GetEndOfSequence() {
						n++
					}
				}
			}
			st.CloseSend()
		}
	}()
	return &wg
}

func crashWriter(ctx context.Context, c reverbpb.ReverbServiceClient, led *ledger, r *rand.Rand, base uint64) {
	st, err := c.InsertStream(ctx)
	if err != nil {
		return
	}
	sent := map[uint64]float64{}
	var sentMu sync.Mutex
	var recv sync.WaitGroup
	defer recv.Wait() // every confirmation read is in the ledger on return
	recv.Go(func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			now := time.Now()
			led.mu.Lock()
			sentMu.Lock()
			for _, k := range resp.GetKeys() {
				led.hist[k] = []acked{{sent[k], now}}
				led.total++
			}
			sentMu.Unlock()
			led.mu.Unlock()
		}
	})
	var held uint64 // the chunk kept from the previous request, or 0
	for i := uint64(1); ctx.Err() == nil; i++ {
		ck := base | i<<8
		req := &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{{
			ChunkKey:      ck,
			SequenceRange: &reverbpb.SequenceRange{EpisodeId: base | i>>3},
			Data: &reverbpb.ChunkData_Data{Tensors: []*tensorflowpb.TensorProto{{
				Dtype:         tensorflowpb.DataType_DT_FLOAT,
				TensorShape:   &tensorflowpb.TensorShapeProto{Dim: []*tensorflowpb.TensorShapeProto_Dim{{Size: 2}}},
				TensorContent: make([]byte, 8),
			}}},
			DataTensorsLen: 1,
		}}}
		// One to three items per chunk; some span the kept chunk too.
		for j := range uint64(1 + r.IntN(3)) {
			key := ck | j
			slices := []*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: ck, Offset: int32(j % 2), Length: 1}}
			if held != 0 && j == 0 {
				slices = append([]*reverbpb.FlatTrajectory_ChunkSlice{{ChunkKey: held, Offset: 1, Length: 1}}, slices...)
			}
			p := float64(1 + r.IntN(1000))
			sentMu.Lock()
			sent[key] = p
			sentMu.Unlock()
			req.Items = append(req.Items, &reverbpb.PrioritizedItem{Key: key, Table: "prio", Priority: p,
				FlatTrajectory: &reverbpb.FlatTrajectory{Columns: []*reverbpb.FlatTrajectory_Column{{ChunkSlices: slices}}}})
		}
		held = 0
		if r.IntN(2) == 0 {
			held = ck
			req.KeepChunkKeys = []uint64{ck}
		}
		if st.Send(req) != nil {
			return
		}
		if i%4 == 0 { // bounded: the state is checked after every kill
			time.Sleep(time.Millisecond)
		}
	}
}

// checkRecovered checks a restarted server against the ledger. It takes a
// checkpoint (through the RPC) and reads every item from the file; the
// chunk count the server logged after replaying its log must equal the
// distinct chunks the items reference: no chunk is orphaned. Nothing
// acknowledged may be lost: every confirmed item must be there, with a
// priority acknowledged last or sent since, and every acknowledged delete
// must hold. It returns, for each confirmed item missing, how long before
// the kill it was confirmed.
func checkRecovered(t *testing.T, p *proc, conn *grpc.ClientConn, led *ledger, killedAt time.Time) (missing []time.Duration) {
	t.Helper()
	line := ""
	for deadline := time.Now().Add(10 * time.Second); line == "" && time.Now().Before(deadline); {
		line = logLine(p, "write-ahead log replayed")
		if line == "" {
			time.Sleep(10 * time.Millisecond)
		}
	}
	var replayed struct {
		Items  int64 `json:"items"`
		Chunks int64 `json:"chunks"`
	}
	if err := json.Unmarshal([]byte(line), &replayed); err != nil {
		t.Fatalf("no replay log line (%v): %q", err, line)
	}
	path := checkpointRPC(t, conn)
	items := map[uint64]float64{}
	chunks := map[uint64]bool{}
	_, err := checkpoint.Read(filepath.Join(path, checkpoint.FileName), func(r *checkpoint.Record) error {
		if r.Kind == checkpoint.KindItem {
			items[r.Item.GetKey()] = r.Item.GetPriority()
			for _, col := range r.Item.GetFlatTrajectory().GetColumns() {
				for _, sl := range col.GetChunkSlices() {
					chunks[sl.GetChunkKey()] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(items)) != replayed.Items || int64(len(chunks)) != replayed.Chunks {
		t.Fatalf("after replay the server held %d items and %d chunks; the items reference %d chunks (%d items): orphaned chunks",
			replayed.Items, replayed.Chunks, len(chunks), len(items))
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	// Every acknowledgement counts, even one read off the socket before
	// the kill and noted after it.
	settle := time.Now().Add(-time.Hour) // the time of a value an earlier check settled
	for k := range led.hist {
		got, ok := items[k]
		switch {
		case !ok && led.deleting[k]: // the delete in flight was applied
			led.deleted[k] = acked{0, settle}
			delete(led.hist, k)
		case !ok:
			missing = append(missing, killedAt.Sub(led.hist[k][0].at))
			delete(led.hist, k)
		case !containsFloat(led.allowed(k), got):
			t.Fatalf("item %d has priority %v; the clients allow %v (acknowledged: %v; killed at %v)",
				k, got, led.allowed(k), led.hist[k], killedAt)
		default:
			led.hist[k] = []acked{{got, settle}}
		}
		delete(led.updating, k)
		delete(led.deleting, k)
	}
	for k, d := range led.deleted {
		if _, ok := items[k]; ok {
			t.Fatalf("item %d is back after its delete was acknowledged %v before the kill", k, killedAt.Sub(d.at))
		}
	}
	// Items the clients sent but never saw confirmed may be there too
	// (their confirmation was lost with the server): adopt them.
	for k, p := range items {
		if _, ok := led.hist[k]; !ok {
			if _, del := led.deleted[k]; !del {
				led.hist[k] = []acked{{p, settle}}
			}
		}
	}
	return missing
}

func containsFloat(s []float64, v float64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestCrashRecovery is the acceptance test of durable mode: it starts
// "reverie serve" with a write-ahead log, drives inserts from four writers
// with priority updates, deletes and samples, kills the server with
// SIGKILL at a random point, restarts it on the same directory and checks
// the ledger: every confirmed item must be back with its priority, and
// every acknowledged delete must hold. It does so 20 times under fsync
// always, then 5 times under each of interval and never: those answer a
// change once it is written to the file, not yet fsynced, and a SIGKILL
// does not lose what reached the page cache. REVERIE_CRASH_SEED replays a
// run.
func TestCrashRecovery(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("REVERIE_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (REVERIE_CRASH_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, tc := range []struct {
		fsync    string
		interval time.Duration
		kills    int
	}{{"always", 100 * time.Millisecond, 20}, {"interval", 200 * time.Millisecond, 5}, {"never", 100 * time.Millisecond, 5}} {
		t.Run(tc.fsync, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "reverie.yaml")
			ckdir := filepath.Join(dir, "data")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, crashConfig, ckdir, tc.fsync, tc.interval), 0o644); err != nil {
				t.Fatal(err)
			}
			led := newLedger()
			for round := 1; round <= tc.kills+1; round++ {
				p := serve(t, "--config", cfg, "--log-format", "json")
				conn := dial(t, p.addr)
				if round > 1 {
					if missing := checkRecovered(t, p, conn, led, led.killedAt); len(missing) > 0 {
						t.Fatalf("round %d: %d confirmed items are missing after the crash, confirmed from %v to %v before the kill",
							round, len(missing), slices.Min(missing), slices.Max(missing))
					}
				}
				if round == tc.kills+1 {
					p.stop(t, syscall.SIGTERM)
					break
				}
				ctx, cancel := context.WithCancel(context.Background())
				wg := crashLoad(ctx, conn, led, rng, round)
				time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
				// The kill's time is taken before the signal: p.kill
				// returns only once the process is reaped, which a
				// loaded machine can delay, and counting that wait would
				// make what the kill lost look older than it was.
				killedAt := time.Now()
				p.kill(t)
				cancel()
				wg.Wait()
				led.killedAt = killedAt // the clients are stopped: no race
				conn.Close()
			}
			led.mu.Lock()
			defer led.mu.Unlock()
			t.Logf("fsync %s: %d kills, %d items confirmed in all, %d held at the end, %d deletes acknowledged",
				tc.fsync, tc.kills, led.total, len(led.hist), len(led.deleted))
			if led.total < 1000*tc.kills/5 {
				t.Fatalf("only %d items confirmed over %d rounds: the load did not run", led.total, tc.kills)
			}
		})
	}
}
