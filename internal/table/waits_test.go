package table

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/internal/ratelimit"
)

// Calls that find the rate limiter closed are timed until they are
// admitted or give up; calls admitted at once are not counted.
func TestWaits(t *testing.T) {
	f := newFixture(t, fifo, fifo, 1, 1, ratelimit.Queue(1))
	ctx := context.Background()

	// A sample of the empty queue waits, then gives up.
	if _, err := f.table.Sample(ctx, 1, 30*time.Millisecond); !errors.Is(err, ErrRateLimiterTimeout) {
		t.Fatalf("sample of an empty queue: %v", err)
	}
	ins, smp := f.table.Waits()
	if ins.Count() != 0 || smp.Count() != 1 || smp.Sum < 30*time.Millisecond || smp.Counts[0]+smp.Counts[1] != 0 {
		t.Fatalf("after a sample timed out after 30 ms: inserts %+v, samples %+v", ins, smp)
	}

	// Admitted at once: not counted.
	f.insert(1, 1)
	if ins, _ = f.table.Waits(); ins.Count() != 0 {
		t.Fatalf("an insert admitted at once was counted: %+v", ins)
	}

	// The queue is full: an insert waits until a sample takes the first item.
	it := f.item(2, 1, 7)
	done := make(chan error, 1)
	go func() { done <- f.table.Insert(ctx, it) }()
	waitFor(t, func() bool { return f.table.Info().PendingInserts == 1 })
	time.Sleep(20 * time.Millisecond)
	s := f.sample(1)
	s[0].Unpin()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ins, _ = f.table.Waits(); ins.Count() != 1 || ins.Sum < 20*time.Millisecond {
		t.Fatalf("after an insert waited 20 ms: %+v", ins)
	}

	// A sample that waits and is served.
	s = f.sample(1)
	s[0].Unpin()
	got := make(chan error, 1)
	go func() {
		out, err := f.table.Sample(ctx, 1, -1)
		for i := range out {
			out[i].Unpin()
		}
		got <- err
	}()
	waitFor(t, func() bool { return f.table.Info().PendingSamples == 1 })
	f.insert(3, 1)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, smp = f.table.Waits(); smp.Count() != 2 {
		t.Fatalf("after a second sample waited: %+v", smp)
	}
}
