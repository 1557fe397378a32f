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

// ExampleTrajectoryWriter writes one episode of five steps to a queue
// table, with an item for every three consecutive steps.
func ExampleTrajectoryWriter() {
	ctx := context.Background()

	// A server in this process; usually it runs elsewhere.
	srv, err := server.New(server.Config{
		Tables: []server.TableConfig{server.QueueTable("trajectories", 100)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Shutdown(ctx)

	c, err := client.Dial(ctx, lis.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Items reference at most the last 3 steps of each column.
	w, err := c.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	for step := range 5 {
		err := w.Append(ctx, map[string]client.Tensor{
			"observation": client.Vector([]float32{float32(step), float32(step) / 2}),
			"reward":      client.Scalar(float32(step)),
		})
		if err != nil {
			log.Fatal(err)
		}
		if w.EpisodeSteps() < 3 {
			continue
		}
		// The item's columns: the last three observations and rewards.
		err = w.CreateItem(ctx, "trajectories", 1.0, []client.TrajectoryColumn{
			w.History("observation").Last(3),
			w.History("reward").Last(3),
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	// Send everything and wait for the server's confirmations.
	if err := w.EndEpisode(ctx, true); err != nil {
		log.Fatal(err)
	}

	info, err := c.ServerInfo(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("items:", info["trajectories"].CurrentSize)
	// Output: items: 3
}
