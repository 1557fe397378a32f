package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// windowLimit bounds a load test's run when its flows are slow to make
// progress; it is below h2TestDeadline, so that a flow that stalls fails
// on what it got rather than by the watchdog.
const windowLimit = 20 * time.Second

// loadWindow is the run of a load test's flows. Its context ends once
// flow i has reported want[i] results through progress[i] and at least
// least has passed, or after windowLimit whatever the flows reported. A
// loaded machine (go test -race, GOMAXPROCS 1, other packages' tests
// beside) so lengthens a run rather than failing it, and a flow that
// gets nothing still fails.
func loadWindow(t *testing.T, least time.Duration, want ...int) (ctx context.Context, progress []func()) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), windowLimit)
	t.Cleanup(cancel)
	ready := make(chan struct{})
	var waiting atomic.Int64
	waiting.Store(int64(len(want)))
	for _, w := range want {
		if w < 1 {
			t.Fatalf("loadWindow: want %d results of a flow; at least 1", w)
		}
		var n atomic.Int64
		progress = append(progress, func() {
			if n.Add(1) == int64(w) && waiting.Add(-1) == 0 {
				close(ready)
			}
		})
	}
	if len(want) == 0 {
		close(ready)
	}
	go func() {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(least - time.Since(start)):
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, progress
}
