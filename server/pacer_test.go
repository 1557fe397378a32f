package server

import (
	"context"
	"testing"
	"time"
)

// fakeClock is a pacer's clock: sleeping moves it on, and nothing else.
type fakeClock struct {
	t      time.Time
	sleeps []time.Duration
}

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) sleep(d time.Duration) {
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
}

// at is how long n bytes take at rate bytes per second.
func at(n, rate int64) time.Duration {
	return time.Duration(float64(n) / float64(rate) * float64(time.Second))
}

func testPacer(rate int64) (*pacer, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	p := newPacer(context.Background(), rate)
	p.start, p.now, p.sleep = c.t, c.now, c.sleep
	return p, c
}

// TestPacerHoldsRate: a writer that never waits for anything but the
// pacer writes at its rate, sleeping in steps of about pacerStep/rate.
func TestPacerHoldsRate(t *testing.T) {
	const rate = 64 << 20
	p, c := testPacer(rate)
	start := c.t
	const total = 64 << 20
	for written := 0; written < total; written += 4000 {
		p.wrote(4000)
	}
	elapsed := c.t.Sub(start)
	// The writer may be up to one step ahead of the rate when it stops.
	want := at(total-pacerStep, rate)
	if elapsed < want || elapsed > time.Second {
		t.Errorf("64 MiB at 64 MiB/s took %v, want between %v and 1s", elapsed, want)
	}
	longest := time.Duration(0)
	for _, d := range c.sleeps {
		longest = max(longest, d)
	}
	step := at(pacerStep+4000, rate)
	if longest > step {
		t.Errorf("longest sleep %v, want at most one step (%v)", longest, step)
	}
	if len(c.sleeps) < total/pacerStep/2 {
		t.Errorf("%d sleeps for %d steps: the writer runs in bursts", len(c.sleeps), total/pacerStep)
	}
}

// TestPacerForgivesLag: a writer held up elsewhere (the cores were busy
// serving) does not catch up in a burst afterwards.
func TestPacerForgivesLag(t *testing.T) {
	const rate = 64 << 20
	p, c := testPacer(rate)
	for i := 0; i < 4; i++ {
		p.wrote(pacerStep)
	}
	c.t = c.t.Add(time.Second) // a second with nothing written
	resumed := c.t
	const after = 8 << 20
	for written := 0; written < after; written += 4000 {
		p.wrote(4000)
	}
	// Unforgiven, the second's 64 MiB of credit would let all 8 MiB out
	// at once; forgiven, they take their time less the lag allowed, a
	// step before the first look at the clock and a step ahead at the end.
	want := at(after-2*pacerStep, rate) - pacerMaxLag
	if got := c.t.Sub(resumed); got < want {
		t.Errorf("8 MiB after a stall took %v, want at least %v", got, want)
	}
}

// TestPacerUnlimited: a rate of zero or less never sleeps.
func TestPacerUnlimited(t *testing.T) {
	for _, rate := range []int64{0, -1} {
		p, c := testPacer(rate)
		for i := 0; i < 1000; i++ {
			p.wrote(1 << 20)
		}
		if len(c.sleeps) != 0 {
			t.Errorf("rate %d: slept %d times", rate, len(c.sleeps))
		}
	}
}
