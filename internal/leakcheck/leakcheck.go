// Package leakcheck fails a package's tests when goroutines outlive them.
//
// It wraps goleak with a longer wait. goleak.VerifyTestMain looks for
// leftover goroutines for about half a second; a goroutine that has been
// told to stop (a gRPC connection after Close, a server's handler after
// Stop) can take longer than that to be scheduled and return on a loaded
// machine running the race detector, and that is not a leak. Main and None
// wait up to Settle for the goroutines to go, then report whatever is
// still there, as goleak does.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Settle is how long Main and None wait for goroutines to end.
const Settle = 10 * time.Second

// Main runs m's tests and exits; if they passed but left goroutines that
// do not end within Settle, it reports them and exits with status 1. Call
// it from TestMain in place of goleak.VerifyTestMain.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := find(Settle, opts...); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines outlived the tests by %v: %v\n", Settle, err)
			code = 1
		}
	}
	os.Exit(code)
}

// None fails tb if goroutines other than tb's own are left after Settle,
// as goleak.VerifyNone does.
func None(tb testing.TB, opts ...goleak.Option) {
	tb.Helper()
	if err := find(Settle, opts...); err != nil {
		tb.Errorf("goroutines outlived the test by %v: %v", Settle, err)
	}
}

// find asks goleak until it finds no goroutines besides those opts ignore,
// or wait has passed; it returns goleak's last answer.
func find(wait time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(wait)
	for {
		err := goleak.Find(opts...) // itself retries for about 0.4 s
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
