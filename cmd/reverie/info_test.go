package main

import (
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
)

// TestInfo prints the tables of examples/config/reverie.yaml.
func TestInfo(t *testing.T) {
	p := serve(t, "--config", "../../examples/config/reverie.yaml")
	out, err := exec.Command(binary, "info", "--addr", p.addr).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	// name: size/max, sampler, remover, max_times_sampled, rate limiter, ..., signature
	want := map[string][]string{
		"priority_replay": {"0/1000000", "prioritized(0.6)", "fifo", "unlimited", "SampleToInsertRatio(4,", "1000,", "100)"},
		"uniform_replay":  {"0/100000", "uniform", "fifo", "unlimited", "MinSize(1)"},
		"trajectories":    {"0/128", "fifo", "fifo", "1", "Queue(128)"},
	}
	signature := map[string]string{"priority_replay": "yes", "uniform_replay": "no", "trajectories": "yes"}
	for name, fields := range want {
		row := rows[name]
		if len(row) < len(fields)+1 || !slices.Equal(row[1:len(fields)+1], fields) || row[len(row)-1] != signature[name] {
			t.Errorf("table %s: row %q, want it to start with %q and end with %q\n%s", name, row, fields, signature[name], out)
		}
	}
	if !strings.Contains(string(out), "SIGNATURE") || !strings.Contains(string(out), "3 table(s)") {
		t.Errorf("no header:\n%s", out)
	}
}

func TestInfoUnreachable(t *testing.T) {
	out, err := exec.Command(binary, "info", "--addr", "127.0.0.1:1", "--timeout", "300ms").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "cannot reach 127.0.0.1:1") {
		t.Errorf("unreachable server: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "info", "extra").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("extra argument: %v\n%s", err, out)
	}
}

func TestSelectorName(t *testing.T) {
	for _, tc := range []struct {
		o    *reverbpb.KeyDistributionOptions
		want string
	}{
		{&reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Fifo{Fifo: true}}, "fifo"},
		{&reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Lifo{Lifo: true}}, "lifo"},
		{&reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Uniform{Uniform: true}}, "uniform"},
		{&reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Prioritized_{
			Prioritized: &reverbpb.KeyDistributionOptions_Prioritized{PriorityExponent: 0.8}}}, "prioritized(0.8)"},
		{&reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Heap_{
			Heap: &reverbpb.KeyDistributionOptions_Heap{MinHeap: true}}}, "min_heap"},
		{&reverbpb.KeyDistributionOptions{Distribution: &reverbpb.KeyDistributionOptions_Heap_{
			Heap: &reverbpb.KeyDistributionOptions_Heap{}}}, "max_heap"},
		{&reverbpb.KeyDistributionOptions{}, "custom"},
		{nil, "custom"},
	} {
		if got := selectorName(tc.o); got != tc.want {
			t.Errorf("selectorName(%v) = %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestRateLimiterName(t *testing.T) {
	inf := math.MaxFloat64
	for _, tc := range []struct {
		spi              float64
		minSize          int64
		minDiff, maxDiff float64
		sampler, want    string
	}{
		{1, 1, -inf, inf, "uniform", "MinSize(1)"},
		{1, 7, math.Inf(-1), math.Inf(1), "uniform", "MinSize(7)"},
		{1, 1, 0, 128, "fifo", "Queue(128)"},
		{1, 1, 0, 16, "lifo", "Stack(16)"},
		{4, 1000, 3900, 4100, "uniform", "SampleToInsertRatio(4, 1000, 100)"},
		{0.5, 10, 2, 8, "uniform", "SampleToInsertRatio(0.5, 10, 3)"},
		{1, 1, 0, 128, "uniform", "RateLimiter(spi=1, min_size=1, min_diff=0, max_diff=128)"},
		{2, 5, -inf, 30, "uniform", "RateLimiter(spi=2, min_size=5, min_diff=-inf, max_diff=30)"},
		{2, 5, 0, inf, "uniform", "RateLimiter(spi=2, min_size=5, min_diff=0, max_diff=+inf)"},
	} {
		if got := rateLimiterName(tc.spi, tc.minSize, tc.minDiff, tc.maxDiff, tc.sampler); got != tc.want {
			t.Errorf("rateLimiterName(%v, %v, %v, %v, %s) = %q, want %q", tc.spi, tc.minSize, tc.minDiff, tc.maxDiff, tc.sampler, got, tc.want)
		}
	}
}
