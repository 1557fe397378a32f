package main

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/client"
)

// runBenchCmd runs "reverie bench args..." against addr and decodes its
// --json report.
func runBenchCmd(t *testing.T, addr string, args ...string) benchReport {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"bench", "--addr", addr, "--json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reverie bench %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("bench output is not one JSON object: %v\n%s", err, out)
	}
	return rep
}

func checkKind(t *testing.T, name string, k *kindReport, clients int) {
	t.Helper()
	if k == nil {
		t.Fatalf("%s: missing from the report", name)
	}
	if k.Clients != clients || k.Items <= 0 || k.Errors != 0 || k.ItemsPerSec <= 0 || k.MBPerSec <= 0 {
		t.Errorf("%s: %+v", name, *k)
	}
	if !(k.P50Ms > 0 && k.P50Ms <= k.P99Ms && k.P99Ms <= k.P999Ms && k.P999Ms <= k.MaxMs) {
		t.Errorf("%s: latencies p50 %v p99 %v p999 %v max %v are not positive and ordered", name, k.P50Ms, k.P99Ms, k.P999Ms, k.MaxMs)
	}
	n := int64(k.Clients)
	if !(k.ClientItemsMin > 0 && k.ClientItemsMin <= k.ClientItemsMax && k.ClientItemsMin*n <= k.Items && k.Items <= k.ClientItemsMax*n) {
		t.Errorf("%s: per-client items %d-%d do not fit %d items over %d clients", name, k.ClientItemsMin, k.ClientItemsMax, k.Items, n)
	}
}

// TestBenchModes runs each mode for a second against the default table.
func TestBenchModes(t *testing.T) {
	p := serve(t)
	for _, tc := range []struct {
		mode             string
		writers, readers int
	}{
		{"insert", 2, 0},
		{"sample", 0, 2},
		{"mixed", 1, 1},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rep := runBenchCmd(t, p.addr, "--mode", tc.mode, "--duration", "1s", "--clients", "2", "--payload", "400")
			if rep.Mode != tc.mode || rep.PayloadBytes != 400 || rep.Errors != 0 || rep.DurationSec != 1 {
				t.Errorf("report: %+v", rep)
			}
			if tc.writers > 0 {
				checkKind(t, "insert", rep.Insert, tc.writers)
				if rep.Insert.Bytes != rep.Insert.Items*400 {
					t.Errorf("insert: %d bytes for %d items", rep.Insert.Bytes, rep.Insert.Items)
				}
			} else if rep.Insert != nil {
				t.Errorf("insert figures in %s mode", tc.mode)
			}
			if tc.readers > 0 {
				checkKind(t, "sample", rep.Sample, tc.readers)
			} else if rep.Sample != nil {
				t.Errorf("sample figures in %s mode", tc.mode)
			}
		})
	}
}

// TestBenchItems checks that --items inserts exactly that many items.
func TestBenchItems(t *testing.T) {
	p := serve(t)
	rep := runBenchCmd(t, p.addr, "--mode", "insert", "--items", "500", "--clients", "3", "--chunk-length", "4", "--compressible")
	if rep.Insert == nil || rep.Insert.Items != 500 || rep.Errors != 0 {
		t.Fatalf("report: %+v %+v", rep, rep.Insert)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info["replay"].Inserts; got != 500 {
		t.Errorf("server counted %d inserts, want 500", got)
	}

	// --items also bounds sampling: 300 samples over two samplers.
	rep = runBenchCmd(t, p.addr, "--mode", "sample", "--items", "300", "--clients", "2", "--in-flight", "4")
	if rep.Sample == nil || rep.Sample.Items != 300 || rep.Prefilled != 500 {
		t.Fatalf("sample report: %+v %+v", rep, rep.Sample)
	}
	if rep.Sample.ClientItemsMin != 150 || rep.Sample.ClientItemsMax != 150 {
		t.Errorf("each sampler's quota is 150; per-client items %d-%d", rep.Sample.ClientItemsMin, rep.Sample.ClientItemsMax)
	}
	if info, err = c.ServerInfo(ctx); err != nil {
		t.Fatal(err)
	}
	if got := info["replay"].Samples; got != 300 {
		t.Errorf("server counted %d samples, want 300", got)
	}
}

func TestBenchText(t *testing.T) {
	p := serve(t)
	out, err := exec.Command(binary, "bench", "--addr", p.addr, "--mode", "mixed", "--clients", "2", "--items", "50").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"items/s", "MB/s", "p50", "p99", "p999", "insert", "sample", "errors"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--mode", "nope"}, 2, "--mode"},
		{[]string{"--payload", "2"}, 2, "--payload"},
		{[]string{"--mode", "mixed", "--clients", "1"}, 2, "mixed"},
		{[]string{"--addr", "127.0.0.1:1", "--timeout", "300ms"}, 1, "cannot reach"},
	} {
		out, err := exec.Command(binary, append([]string{"bench"}, tc.args...)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("bench %v: %v, want exit %d mentioning %q\n%s", tc.args, err, tc.code, tc.want, out)
		}
	}
	p := serve(t)
	out, err := exec.Command(binary, "bench", "--addr", p.addr, "--table", "nope", "--duration", "100ms").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), `no table "nope"`) {
		t.Errorf("unknown table: %v\n%s", err, out)
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	if h.quantile(0.5) != 0 {
		t.Error("empty histogram has a median")
	}
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	var other histogram
	other.record(time.Second)
	h.merge(&other)
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}, {1, time.Second}} {
		got := h.quantile(tc.q)
		if diff := float64(got-tc.want) / float64(tc.want); diff < -0.011 || diff > 0.011 {
			t.Errorf("quantile(%v) = %v, want %v within 1%%", tc.q, got, tc.want)
		}
	}
	if h.n != 1001 || h.min != time.Microsecond || h.max != time.Second {
		t.Errorf("n %d min %v max %v", h.n, h.min, h.max)
	}
}

// TestHistogramBuckets checks the bucket arithmetic on every duration up
// to 2^20 ns and on random ones up to an hour, and the quantiles of a
// log-uniform sample against the exact ones.
func TestHistogramBuckets(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(d time.Duration) {
		i := histBucket(d)
		if lo, hi := histLow(i), histLow(i+1); d < lo || d >= hi || float64(hi-lo) > 0.008*float64(lo)+1 {
			t.Fatalf("%v in bucket %d = [%v, %v)", d, i, lo, hi)
		}
	}
	for d := time.Duration(1); d < 1<<20; d++ {
		check(d)
	}
	var h histogram
	var all []time.Duration
	for range 100000 {
		d := time.Duration(math.Exp(math.Log(50) + r.Float64()*(math.Log(float64(time.Hour))-math.Log(50))))
		check(d)
		h.record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999} {
		want := all[int(math.Ceil(q*float64(len(all))))-1]
		if got := h.quantile(q); math.Abs(float64(got-want)) > 0.01*float64(want) {
			t.Errorf("quantile(%v) = %v, want %v within 1%%", q, got, want)
		}
	}
}

// TestBenchMixedQueue: in mixed mode on a queue the samplers drain the
// queue until the writers' final flushes are done, so the run ends within
// moments of --duration (it used to wait out the writers' one-minute flush
// timeout when the samplers stopped first and the queue was full).
func TestBenchMixedQueue(t *testing.T) {
	cfg := t.TempDir() + "/queue.yaml"
	if err := os.WriteFile(cfg, []byte("tables:\n  - {name: q, queue: 10}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := serve(t, "--config", cfg)
	start := time.Now()
	rep := runBenchCmd(t, p.addr, "--mode", "mixed", "--table", "q", "--duration", "1s", "--clients", "4", "--max-in-flight-items", "64")
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("a 1 s mixed run on a queue took %v", took)
	}
	checkKind(t, "insert", rep.Insert, 2)
	checkKind(t, "sample", rep.Sample, 2)
	if rep.Errors != 0 || rep.Insert.FlushMs > 5000 {
		t.Fatalf("report: %+v, insert %+v", rep, *rep.Insert)
	}
}

// TestBenchGC checks that the bench raises its GC percent unless GOGC is
// set in its environment.
func TestBenchGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if got := benchGC(func(string) string { return "" }); got != benchGCPercent {
		t.Errorf("benchGC with no GOGC = %d, want %d", got, benchGCPercent)
	}
	if got := debug.SetGCPercent(70); got != benchGCPercent {
		t.Errorf("GC percent after benchGC = %d, want %d", got, benchGCPercent)
	}
	env := func(k string) string {
		if k == "GOGC" {
			return "70"
		}
		return ""
	}
	if got := benchGC(env); got != 70 {
		t.Errorf("benchGC with GOGC=70 = %d, want the 70 in force", got)
	}
	if got := debug.SetGCPercent(100); got != 70 {
		t.Errorf("GC percent after benchGC with GOGC set = %d, want 70", got)
	}
}

// TestBenchSecondSignalStops: a writer blocked on a full queue keeps
// reverie bench in its final flush (up to a minute) after a first SIGINT;
// a second one stops it at once, as it would any command.
func TestBenchSecondSignalStops(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "q.yaml")
	if err := os.WriteFile(cfg, []byte("tables:\n  - name: q\n    queue: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := serve(t, "--config", cfg)
	defer p.stop(t, syscall.SIGTERM)
	cmd := exec.Command(binary, "bench", "--addr", p.addr, "--table", "q", "--mode", "insert", "--clients", "1", "--duration", "60s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	// The writer is blocked once the queue holds its one item.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		info, err := c.ServerInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info["q"].CurrentSize == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Signal until it exits: the first ends the run, a later one the
	// process. Before, every one after the first was swallowed and the
	// flush ran its minute.
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
			done <- nil // for the deferred wait
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("reverie bench took %v to stop", d)
			}
			return
		case <-tick.C:
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("reverie bench still running %v after the first of repeated SIGINTs", time.Since(start))
		}
	}
}
