package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/server"
)

// Sampling from a queue table: start a server, insert one step with
// Client.Insert, and read it back with a Sampler.
func ExampleSampler() {
	// A server with one queue table, listening on a free loopback port.
	srv, err := server.New(server.Config{
		Tables: []server.TableConfig{server.QueueTable("queue", 10)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Close(); <-served }()

	ctx := context.Background()
	c, err := client.Dial(ctx, lis.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Insert one step of two columns: an observation and an action.
	obs := client.Vector([]float32{0.5, 1.5, 2.5})
	action := client.Scalar[int64](3)
	if err := c.Insert(ctx, []client.Tensor{obs, action}, map[string]float64{"queue": 1}); err != nil {
		log.Fatal(err)
	}

	// Sample it back. MaxSamples ends the iteration after one sample.
	s, err := c.NewSampler(client.SamplerOptions{Table: "queue", MaxSamples: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for sample, err := range s.Samples(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		o, _ := client.Values[float32](sample.Columns[0])
		a, _ := client.ScalarValue[int64](sample.Columns[1])
		fmt.Println("table:", sample.Info.Table, "times sampled:", sample.Info.TimesSampled)
		fmt.Println("obs:", sample.Columns[0].Shape, o)
		fmt.Println("action:", a)
	}
	// Output:
	// table: queue times sampled: 1
	// obs: [3] [0.5 1.5 2.5]
	// action: 3
}
