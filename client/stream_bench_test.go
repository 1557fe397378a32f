package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/selector"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

// benchPayloads returns n float32 vectors of random values, size bytes each,
// as "reverie bench" writes them.
func benchPayloads(n, size int) []client.Tensor {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]client.Tensor, n)
	for i := range out {
		vals := make([]float32, size/4)
		for j := range vals {
			vals[j] = r.Float32()
		}
		out[i] = client.Vector(vals)
	}
	return out
}

func benchServer(b *testing.B) *client.Client {
	b.Helper()
	s := servertest.Start(b, server.Config{
		Tables: []server.TableConfig{{
			Name:        "t",
			Sampler:     selector.Spec{Kind: selector.KindUniform},
			Remover:     selector.Spec{Kind: selector.KindFIFO},
			MaxSize:     1000,
			RateLimiter: server.MinSize(1),
		}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx := context.Background()
	c, err := client.Dial(ctx, s.Addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// benchInsert appends n one-step items of the payloads, cycling, and
// flushes.
func benchInsert(b *testing.B, w *client.TrajectoryWriter, payloads []client.Tensor, n int, loop func() bool) {
	ctx := context.Background()
	item := []client.TrajectoryColumn{{}}
	for i := 0; loop == nil && i < n || loop != nil && loop(); i++ {
		if err := w.Append(ctx, map[string]client.Tensor{"x": payloads[i%len(payloads)]}); err != nil {
			b.Fatal(err)
		}
		item[0] = w.History("x").At(-1).Squeeze()
		if err := w.CreateItem(ctx, "t", 1, item); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWriterInsert measures a TrajectoryWriter inserting one-step
// items of one float32 tensor into an in-process server (which shares the
// CPU), as "reverie bench --mode insert" does.
func BenchmarkWriterInsert(b *testing.B) {
	for _, size := range []int{400, 40_000, 400_000} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			c := benchServer(b)
			w, err := c.NewTrajectoryWriter(context.Background(), client.WriterOptions{NumKeepAliveRefs: 1, ChunkLength: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			payloads := benchPayloads(8, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			benchInsert(b, w, payloads, 0, b.Loop)
		})
	}
}

// BenchmarkSamplerNext measures a Sampler (one worker, 16 samples in
// flight) reading one-step items of one float32 tensor from an in-process
// server, as "reverie bench --mode sample" does.
func BenchmarkSamplerNext(b *testing.B) {
	for _, size := range []int{400, 40_000} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			c := benchServer(b)
			ctx := context.Background()
			w, err := c.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1, ChunkLength: 1})
			if err != nil {
				b.Fatal(err)
			}
			benchInsert(b, w, benchPayloads(8, size), 100, nil)
			w.Close()
			s, err := c.NewSampler(client.SamplerOptions{Table: "t", NumWorkers: 1, MaxInFlightSamplesPerWorker: 16})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Next(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
