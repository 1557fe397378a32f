package server_test

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gather returns the collector's samples as "name{label=value,...}" ->
// value, labels sorted by name.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%s", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[fmt.Sprintf("%s{%s}", mf.GetName(), strings.Join(labels, ","))] = v
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	cfg := testConfig(prioritizedTable("prio", 10), uniformTable("other", 5, server.MinSize(1)))
	cfg.CheckpointDir = t.TempDir()
	s := servertest.Start(t, cfg)
	ctx := ctxT(t)

	if problems, err := testutil.CollectAndLint(s.Collector()); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	before := gather(t, s.Collector())
	for _, name := range []string{`reverie_table_items{table=prio}`, `reverie_table_inserts_total{table=other}`, `reverie_checkpoints_total{result=ok}`} {
		if v, ok := before[name]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v) before any call, want 0", name, v, ok)
		}
	}
	if _, ok := before["reverie_checkpoint_last_duration_seconds{}"]; ok {
		t.Error("a last checkpoint's duration before any checkpoint")
	}
	if got := before["reverie_table_max_items{table=prio}"]; got != 10 {
		t.Errorf("max items %v, want 10", got)
	}

	var reqs []*reverbpb.InsertStreamRequest
	for k := uint64(1); k <= 3; k++ {
		reqs = append(reqs, &reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(k, k, 1)},
			Items: []*reverbpb.PrioritizedItem{item(100+k, "prio", 1, k, 0, 1)}})
	}
	if _, err := insertAll(ctx, s.Client, reqs...); err != nil {
		t.Fatal(err)
	}
	if _, err := sampleN(ctx, s.Client, "prio", 2, 5000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.MutatePriorities(ctx, &reverbpb.MutatePrioritiesRequest{Table: "prio",
		Updates: []*reverbpb.KeyWithPriority{{Key: 101, Priority: 3}}, DeleteKeys: []uint64{102}}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Client.MutatePriorities(ctx, &reverbpb.MutatePrioritiesRequest{Table: "nope"})
	wantCode(t, err, codes.NotFound)
	if _, err := s.Client.Checkpoint(ctx, &reverbpb.CheckpointRequest{}); err != nil {
		t.Fatal(err)
	}

	got := gather(t, s.Collector())
	const mutate = "/deepmind.reverb.ReverbService/MutatePriorities"
	for name, want := range map[string]float64{
		`reverie_table_items{table=prio}`:                                                        2,
		`reverie_table_inserts_total{table=prio}`:                                                3,
		`reverie_table_samples_total{table=prio}`:                                                2,
		`reverie_table_priority_updates_total{table=prio}`:                                       1,
		`reverie_table_deletes_total{table=prio}`:                                                1,
		`reverie_table_items{table=other}`:                                                       0,
		`reverie_table_blocked_samples{table=prio}`:                                              0,
		`reverie_chunks{}`:                                                                       2,
		`reverie_checkpoints_total{result=ok}`:                                                   1,
		`reverie_checkpoints_total{result=error}`:                                                0,
		`reverie_rpcs_started_total{method=` + mutate + `}`:                                      2,
		`reverie_rpcs_handled_total{code=OK,method=` + mutate + `}`:                              1,
		`reverie_rpcs_handled_total{code=NotFound,method=` + mutate + `}`:                        1,
		`reverie_rpcs_started_total{method=/deepmind.reverb.ReverbService/InsertStream}`:         1,
		`reverie_rpcs_handled_total{code=OK,method=/deepmind.reverb.ReverbService/InsertStream}`: 1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if v := got["reverie_checkpoint_last_duration_seconds{}"]; !(v > 0) {
		t.Errorf("last checkpoint's duration %v, want > 0", v)
	}
	if v := got["reverie_chunk_bytes{}"]; !(v > 0) {
		t.Errorf("chunk bytes %v, want > 0", v)
	}

	// Counters never go down: Reset sets the rate limiter's counts back
	// to zero, and they used to follow it (found by review).
	if _, err := s.Client.Reset(ctx, &reverbpb.ResetRequest{Table: "prio"}); err != nil {
		t.Fatal(err)
	}
	after := gather(t, s.Collector())
	for name, want := range map[string]float64{
		`reverie_table_items{table=prio}`:          0,
		`reverie_table_inserts_total{table=prio}`:  3,
		`reverie_table_samples_total{table=prio}`:  2,
		`reverie_table_deletes_total{table=prio}`:  1,
		`reverie_table_resets_total{table=prio}`:   1,
		`reverie_table_inserts_total{table=other}`: 0,
	} {
		if v, ok := after[name]; !ok || v != want {
			t.Errorf("after Reset: %s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// A sample that waits on the rate limiter and gives up shows in the
// table's sample wait histogram; nothing waited to insert.
func TestMetricsWaits(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("t", 5, server.MinSize(1))))
	ctx := ctxT(t)
	c := reverbpb.NewReverbServiceClient(servertest.Dial(t, s.Addr))
	if _, err := sampleN(ctx, c, "t", 1, 30); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("sample of an empty table with a 30 ms timeout: %v", err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hists := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				hists[mf.GetName()] = h
			}
		}
	}
	smp, ins := hists["reverie_table_sample_wait_seconds"], hists["reverie_table_insert_wait_seconds"]
	if smp == nil || ins == nil {
		t.Fatalf("wait histograms missing: %v", hists)
	}
	if smp.GetSampleCount() != 1 || smp.GetSampleSum() < 0.03 || ins.GetSampleCount() != 0 {
		t.Fatalf("sample waits %v, insert waits %v; want one sample wait of at least 30 ms", smp, ins)
	}
	// Cumulative buckets: nothing at or under 10 ms, everything by 60 s.
	for _, b := range smp.GetBucket() {
		if want := uint64(0); b.GetUpperBound() <= 0.01 && b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d", b.GetUpperBound(), b.GetCumulativeCount())
		}
		if b.GetUpperBound() == 60 && b.GetCumulativeCount() != 1 {
			t.Errorf("bucket le=60 holds %d, want 1", b.GetCumulativeCount())
		}
	}
}

// TestMetricsSpill: in hybrid mode the chunk store's memory and spill
// traffic show in the metrics, as StorageStats counts them; in memory mode
// they are absent.
func TestMetricsSpill(t *testing.T) {
	cfg := testConfig(uniformTable("u", 100, server.MinSize(1)))
	cfg.Storage = server.StorageConfig{Mode: server.StorageHybrid, MemoryLimitBytes: 25 << 10, Dir: filepath.Join(t.TempDir(), "spill")}
	s := servertest.Start(t, cfg)
	insertBig(t, s.Client, "u", 20, 2500) // 10 kB chunks: most spill
	if _, err := sampleN(ctxT(t), s.Client, "u", 50, 1000); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(s.Collector()); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	got := gather(t, s.Collector())
	st := s.StorageStats()
	if st.Spills == 0 || st.ColdReads == 0 {
		t.Fatalf("nothing spilled or read cold: %+v", st)
	}
	for name, want := range map[string]int64{
		`reverie_chunk_spill_writes_total{result=ok}`:    st.Spills,
		`reverie_chunk_spill_writes_total{result=error}`: 0,
		`reverie_chunk_reads_total{source=spill}`:        st.ColdReads,
		`reverie_chunk_reads_total{source=memory}`:       st.Hits,
		`reverie_chunk_read_errors_total{}`:              0,
		`reverie_chunk_spill_delete_errors_total{}`:      0,
	} {
		if v, ok := got[name]; !ok || v != float64(want) {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if v := got[`reverie_chunk_memory_bytes{}`]; !(v > 0 && v <= 25<<10) {
		t.Errorf("memory bytes %v, want in (0, 25 KiB]", v)
	}

	mem := servertest.Start(t, testConfig(uniformTable("u", 100, server.MinSize(1))))
	for name := range gather(t, mem.Collector()) {
		if strings.HasPrefix(name, "reverie_chunk_spill") || strings.HasPrefix(name, "reverie_chunk_reads") {
			t.Errorf("memory mode reports %s", name)
		}
	}
}
