package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestServeMetrics: --metrics serves the server's, the Go runtime's and
// the process's metrics at /metrics.
func TestServeMetrics(t *testing.T) {
	p := serve(t, "--metrics", "localhost:0")
	m := addrRE.FindStringSubmatch(logLine(p, "serving metrics"))
	if m == nil {
		t.Fatal("no metrics address in the logs")
	}
	runBenchJSON(t, p, "--addr", p.addr, "--mode", "insert", "--items", "50")
	resp, err := http.Get("http://127.0.0.1:" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`reverie_table_inserts_total{table="replay"} 50`,
		`reverie_table_items{table="replay"} 50`,
		`reverie_rpcs_started_total{method="/deepmind.reverb.ReverbService/InsertStream"} 1`,
		`reverie_rpcs_handled_total{code="OK",method="/deepmind.reverb.ReverbService/ServerInfo"} 1`,
		"go_goroutines ",
		"go_gc_duration_seconds_count ",
		"go_cpu_classes_gc_total_cpu_seconds_total ",
		"go_gc_cycles_total_gc_cycles_total ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("%s\n%s", resp.Status, body)
	}
	p.stop(t, syscall.SIGTERM)
}

// A --metrics address that cannot be bound stops the server at start.
func TestServeMetricsAddrInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cmd := exec.Command(binary, "serve", "--listen", "127.0.0.1:0", "--metrics", taken.Addr().String())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "cannot serve metrics") {
		t.Fatalf("serve with a taken --metrics address: %v\n%s", err, out)
	}
}
