package server_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
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
}
