package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/reverie-rl/reverie/internal/table"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Metrics in the Prometheus format (docs/config.md, Metrics). The table
// and chunk figures are read when scraped, from the counters the server
// keeps anyway; only the RPC and checkpoint counters are kept for them,
// with atomics.

// rpcCounters counts one method's calls by the code they ended with.
type rpcCounters struct {
	started atomic.Int64
	handled [17]atomic.Int64 // by codes.Code, 0 (OK) to 16 (Unauthenticated)
}

// serverMetrics are the counters kept for the metrics.
type serverMetrics struct {
	rpcs sync.Map // full method name -> *rpcCounters

	checkpointsOK, checkpointsFailed atomic.Int64
	lastCheckpointNanos              atomic.Int64 // duration of the last successful checkpoint
	lastCheckpointUnixNanos          atomic.Int64 // when it ended
}

func (m *serverMetrics) method(name string) *rpcCounters {
	if c, ok := m.rpcs.Load(name); ok {
		return c.(*rpcCounters)
	}
	c, _ := m.rpcs.LoadOrStore(name, new(rpcCounters))
	return c.(*rpcCounters)
}

func (m *serverMetrics) handled(c *rpcCounters, err error) {
	code := status.Code(err)
	if int(code) >= len(c.handled) {
		code = codes.Unknown
	}
	c.handled[code].Add(1)
}

func (m *serverMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c := m.method(info.FullMethod)
	c.started.Add(1)
	resp, err := handler(ctx, req)
	m.handled(c, err)
	return resp, err
}

func (m *serverMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c := m.method(info.FullMethod)
	c.started.Add(1)
	err := handler(srv, ss)
	m.handled(c, err)
	return err
}

// checkpointDone records the end of a checkpoint that started at start.
func (m *serverMetrics) checkpointDone(start time.Time, err error) {
	if err != nil {
		m.checkpointsFailed.Add(1)
		return
	}
	now := time.Now()
	m.checkpointsOK.Add(1)
	m.lastCheckpointNanos.Store(int64(now.Sub(start)))
	m.lastCheckpointUnixNanos.Store(now.UnixNano())
}

var (
	tableLabel = []string{"table"}

	descTableItems        = prometheus.NewDesc("reverie_table_items", "Items the table holds.", tableLabel, nil)
	descTableMaxItems     = prometheus.NewDesc("reverie_table_max_items", "The table's max_size.", tableLabel, nil)
	descTableEpisodes     = prometheus.NewDesc("reverie_table_episodes", "Episodes with items in the table.", tableLabel, nil)
	descTableInserts      = prometheus.NewDesc("reverie_table_inserts_total", "Items inserted into the table (a new key, or a priority update through an insert).", tableLabel, nil)
	descTableSamples      = prometheus.NewDesc("reverie_table_samples_total", "Samples taken from the table.", tableLabel, nil)
	descTableUpdates      = prometheus.NewDesc("reverie_table_priority_updates_total", "Priority updates applied to the table's items.", tableLabel, nil)
	descTableDeletes      = prometheus.NewDesc("reverie_table_deletes_total", "Items deleted from the table: evicted, sampled max_times_sampled times, or deleted by a client.", tableLabel, nil)
	descTableResets       = prometheus.NewDesc("reverie_table_resets_total", "Resets of the table.", tableLabel, nil)
	descTablePendingIns   = prometheus.NewDesc("reverie_table_blocked_inserts", "Inserts waiting on the table's rate limiter.", tableLabel, nil)
	descTablePendingSmp   = prometheus.NewDesc("reverie_table_blocked_samples", "Samples waiting on the table's rate limiter.", tableLabel, nil)
	descTableInsertWait   = prometheus.NewDesc("reverie_table_insert_wait_seconds", "How long inserts that found the table's rate limiter closed waited, until admitted or until they gave up; inserts admitted at once are not counted.", tableLabel, nil)
	descTableSampleWait   = prometheus.NewDesc("reverie_table_sample_wait_seconds", "How long samples that found the table's rate limiter closed waited, until served or until they gave up (deadline, rate_limiter_timeout_ms); samples served at once are not counted.", tableLabel, nil)
	descChunks            = prometheus.NewDesc("reverie_chunks", "Chunks held, across tables.", nil, nil)
	descChunkBytes        = prometheus.NewDesc("reverie_chunk_bytes", "Encoded size of the chunks held, bytes.", nil, nil)
	descCheckpoints       = prometheus.NewDesc("reverie_checkpoints_total", "Checkpoints written (result=ok) or failed (result=error).", []string{"result"}, nil)
	descCheckpointSeconds = prometheus.NewDesc("reverie_checkpoint_last_duration_seconds", "How long the last successful checkpoint took to write.", nil, nil)
	descCheckpointTime    = prometheus.NewDesc("reverie_checkpoint_last_success_timestamp_seconds", "When the last successful checkpoint ended, Unix time.", nil, nil)
	descChunkMemory       = prometheus.NewDesc("reverie_chunk_memory_bytes", "Hybrid and disk modes: chunk data held in memory, bytes (the rest is only in the spill).", nil, nil)
	descChunkReads        = prometheus.NewDesc("reverie_chunk_reads_total", "Hybrid and disk modes: chunk reads, by where the data came from (memory, or spill for a cold read).", []string{"source"}, nil)
	descChunkReadErrors   = prometheus.NewDesc("reverie_chunk_read_errors_total", "Hybrid and disk modes: chunk reads from the spill that failed.", nil, nil)
	descSpillWrites       = prometheus.NewDesc("reverie_chunk_spill_writes_total", "Hybrid and disk modes: chunks written to the spill (result=ok) or whose write failed, leaving the data in memory (result=error).", []string{"result"}, nil)
	descSpillDeletes      = prometheus.NewDesc("reverie_chunk_spill_deletes_total", "Hybrid and disk modes: released chunks deleted from the spill.", nil, nil)
	descSpillDeleteErrors = prometheus.NewDesc("reverie_chunk_spill_delete_errors_total", "Hybrid and disk modes: batches of spill deletes that failed twice; their entries stay in the spill until the next start wipes it.", nil, nil)
	descRPCStarted        = prometheus.NewDesc("reverie_rpcs_started_total", "Calls started, by gRPC method (a stream counts once).", []string{"method"}, nil)
	descRPCHandled        = prometheus.NewDesc("reverie_rpcs_handled_total", "Calls ended, by gRPC method and status code.", []string{"method", "code"}, nil)
)

// collector reads the server's metrics when scraped.
type collector struct{ s *Server }

// Collector returns a Prometheus collector of the server's metrics: per
// table, items held, inserts, samples, updates, deletes, callers blocked
// on the rate limiter and how long they waited; the chunk store's size,
// and in the hybrid and disk modes its memory and spill traffic;
// checkpoints; and calls by method and status code. Register it with a registry of the
// program's (`reverie serve --metrics ADDR` serves one on /metrics).
func (s *Server) Collector() prometheus.Collector { return collector{s} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTableItems, descTableMaxItems, descTableEpisodes, descTableInserts,
		descTableSamples, descTableUpdates, descTableDeletes, descTableResets, descTablePendingIns,
		descTablePendingSmp, descTableInsertWait, descTableSampleWait, descChunks, descChunkBytes,
		descChunkMemory, descChunkReads, descChunkReadErrors, descSpillWrites, descSpillDeletes, descSpillDeleteErrors,
		descCheckpoints, descCheckpointSeconds,
		descCheckpointTime, descRPCStarted, descRPCHandled} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for _, name := range s.names {
		t := s.tables[name]
		info, st := t.Info(), t.stats.Snapshot()
		gauge(descTableItems, float64(info.Size), name)
		gauge(descTableMaxItems, float64(info.MaxSize), name)
		gauge(descTableEpisodes, float64(info.NumEpisodes), name)
		// From the statistics, which only grow: the rate limiter's
		// counts go back to zero on Reset, and a counter that falls
		// reads as a restart of the process.
		counter(descTableInserts, float64(st.Inserts), name)
		counter(descTableSamples, float64(st.Samples), name)
		counter(descTableUpdates, float64(st.Updates), name)
		counter(descTableDeletes, float64(st.Deletes), name)
		counter(descTableResets, float64(st.Resets), name)
		gauge(descTablePendingIns, float64(info.PendingInserts), name)
		gauge(descTablePendingSmp, float64(info.PendingSamples), name)
		ins, smp := t.Waits()
		ch <- waitHistogram(descTableInsertWait, ins, name)
		ch <- waitHistogram(descTableSampleWait, smp, name)
	}
	gauge(descChunks, float64(s.chunks.Len()))
	gauge(descChunkBytes, float64(s.chunks.Bytes()))
	if s.chunks.Tiered() {
		st := s.chunks.Stats()
		gauge(descChunkMemory, float64(st.MemoryBytes))
		counter(descChunkReads, float64(st.Hits), "memory")
		counter(descChunkReads, float64(st.ColdReads), "spill")
		counter(descChunkReadErrors, float64(st.ReadErrors))
		counter(descSpillWrites, float64(st.Spills), "ok")
		counter(descSpillWrites, float64(st.SpillErrors), "error")
		counter(descSpillDeletes, float64(st.Deletes))
		counter(descSpillDeleteErrors, float64(st.DeleteErrors))
	}
	m := &s.metrics
	counter(descCheckpoints, float64(m.checkpointsOK.Load()), "ok")
	counter(descCheckpoints, float64(m.checkpointsFailed.Load()), "error")
	if at := m.lastCheckpointUnixNanos.Load(); at != 0 { // none before the first
		gauge(descCheckpointSeconds, time.Duration(m.lastCheckpointNanos.Load()).Seconds())
		gauge(descCheckpointTime, float64(at)/1e9)
	}
	m.rpcs.Range(func(k, v any) bool {
		method, rc := k.(string), v.(*rpcCounters)
		counter(descRPCStarted, float64(rc.started.Load()), method)
		for code := range rc.handled {
			if n := rc.handled[code].Load(); n > 0 {
				counter(descRPCHandled, float64(n), method, codes.Code(code).String())
			}
		}
		return true
	})
}

// waitHistogram is w as a Prometheus histogram.
func waitHistogram(d *prometheus.Desc, w table.WaitStats, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(table.WaitBuckets))
	var cum uint64
	for i, le := range table.WaitBuckets {
		cum += uint64(w.Counts[i])
		buckets[le] = cum
	}
	return prometheus.MustNewConstHistogram(d, uint64(w.Count()), w.Sum.Seconds(), buckets, labels...)
}
