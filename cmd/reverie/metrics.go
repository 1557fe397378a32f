package main

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/reverie-rl/reverie/server"
)

// gcRuntimeMetrics are the runtime/metrics served besides the Go
// collector's defaults: the collector's CPU time and its cycles, as
// go_cpu_classes_gc_total_cpu_seconds_total and
// go_gc_cycles_total_gc_cycles_total. The chunks and items of a large
// table are most of the heap, and the CPU its collections take is the
// first thing to look at when a server's CPU per item rises with its
// table (docs/benchmarks-notes.md, "Garbage collection and the sample
// tail").
var gcRuntimeMetrics = collectors.GoRuntimeMetricsRule{
	Matcher: regexp.MustCompile(`^/cpu/classes/gc/total:cpu-seconds$|^/gc/cycles/total:gc-cycles$`),
}

// serveMetrics serves srv's metrics, with the Go runtime's and the
// process's, in the Prometheus text format on addr at /metrics, on a mux
// of its own. It returns a function that stops it.
func serveMetrics(addr string, srv *server.Server, log *slog.Logger) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collector(),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcRuntimeMetrics)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", lis.Addr().String(), "path", "/metrics")
	return func() { hs.Close() }, nil
}
