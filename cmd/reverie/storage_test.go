package main

import (
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/reverie-rl/reverie/server"
)

// rssBaseline bounds what the process holds besides the Go heap and
// pebble: the binary's text and data, the runtime, goroutine stacks. An
// empty server measures about 37 MiB (docs/storage.md).
const rssBaseline = 48 << 20

// TestServeHybridRSS is the acceptance test of hybrid storage: "reverie
// serve" with memory_limit_bytes at a tenth of the data inserted (300 MB
// of 40 kB items, limit 30 MB) keeps its peak RSS within the limit plus the
// stated overhead (server.GoMemoryLimit's headroom plus rssBaseline), and
// samples every item it is asked for.
func TestServeHybridRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	const (
		payload = 40_000
		items   = 7_500 // 300 MB
		limit   = 30_000_000
	)
	p := serve(t, "--storage-mode", "hybrid", "--memory-limit-bytes", strconv.Itoa(limit), "--storage-dir", filepath.Join(t.TempDir(), "spill"))
	pid := p.cmd.Process.Pid
	cfg := server.DefaultConfig()
	cfg.Storage = server.StorageConfig{Mode: server.StorageHybrid, MemoryLimitBytes: limit}
	bound := server.GoMemoryLimit(cfg) + rssBaseline
	t.Logf("empty server: RSS %.1f MiB; bound %.1f MiB (limit %.1f MiB + overhead %.1f MiB)",
		mib(procStatus(t, pid, "VmRSS")), mib(bound), mib(limit), mib(bound-limit))

	common := []string{"--addr", p.addr, "--payload", strconv.Itoa(payload)}
	ins, _ := runBenchJSON(t, p, append([]string{"--mode", "insert", "--items", strconv.Itoa(items)}, common...)...)
	if ins.Errors != 0 || ins.Items != items {
		t.Fatalf("insert: %s", ins)
	}
	afterInsert := peakRSS(t, pid)
	t.Logf("insert %s; peak RSS %.1f MiB", ins, mib(afterInsert))

	_, s := runBenchJSON(t, p, append([]string{"--mode", "sample", "--items", "3000", "--clients", "2"}, common...)...)
	if s.Errors != 0 || s.Items != 3000 {
		t.Fatalf("sample: %s", s)
	}
	afterSample := peakRSS(t, pid)
	t.Logf("sample %s; peak RSS %.1f MiB", s, mib(afterSample))
	for _, rss := range []int64{afterInsert, afterSample} {
		if rss > bound {
			t.Errorf("peak RSS %.1f MiB > bound %.1f MiB", mib(rss), mib(bound))
		}
	}
	p.stop(t, syscall.SIGTERM)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
