package leakcheck

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A goroutine that ends after goleak's own retries, but well within the
// wait, is not reported.
func TestWaitsForSlowGoroutines(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	done := make(chan struct{})
	go func() {
		time.Sleep(1500 * time.Millisecond)
		close(done)
	}()
	if err := goleak.Find(opts); err == nil {
		t.Fatal("goleak alone found no goroutine: the test shows nothing")
	}
	start := time.Now()
	if err := find(Settle, opts); err != nil {
		t.Fatalf("a goroutine that ended after %v was reported: %v", time.Since(start), err)
	}
	<-done
}

// A goroutine that does not end is reported once the wait has passed.
func TestReportsLeaks(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	stop := make(chan struct{})
	go func() { <-stop }()
	defer close(stop)
	start := time.Now()
	err := find(time.Second, opts)
	if err == nil {
		t.Fatal("a goroutine blocked for good was not reported")
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("reported after %v, before the wait of 1s", d)
	}
	t.Logf("reported: %v", err)
}
