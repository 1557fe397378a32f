package main

import (
	"os"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/internal/leakcheck"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

// TestRun inserts against a real server, paced and unpaced, and checks
// that every item the report counts is in the table, with its latency.
func TestRun(t *testing.T) {
	srv := servertest.Start(t, server.DefaultConfig())
	var inserted int64
	for _, rate := range []float64{0, 2000} {
		rep, err := run(options{
			addr: srv.Addr, table: server.DefaultTableName, payload: 400,
			writers: 3, conns: 2, inFlight: 4, rate: rate,
			duration: 300 * time.Millisecond, serverPID: os.Getpid(),
		})
		if err != nil {
			t.Fatalf("rate %v: %v", rate, err)
		}
		if rep.Items == 0 || rep.P50Ms <= 0 || rep.P99Ms < rep.P50Ms || rep.ServerCPUUsPerItem <= 0 {
			t.Fatalf("rate %v: implausible report %+v", rate, rep)
		}
		if rate > 0 && rep.ItemsPerSec > 1.5*rate {
			t.Errorf("paced at %v/s, inserted %.0f/s", rate, rep.ItemsPerSec)
		}
		inserted += rep.Items
		st, _ := srv.TableStats(server.DefaultTableName)
		if st.Items != inserted {
			t.Fatalf("rate %v: table holds %d items, the reports count %d", rate, st.Items, inserted)
		}
	}
}

// TestRunUnknownTable checks that a rejected insert fails the run instead
// of hanging it.
func TestRunUnknownTable(t *testing.T) {
	srv := servertest.Start(t, server.DefaultConfig())
	_, err := run(options{
		addr: srv.Addr, table: "nope", payload: 400, writers: 2, conns: 1, inFlight: 4,
		duration: 200 * time.Millisecond,
	})
	if err == nil {
		t.Fatal("inserting into an unknown table: no error")
	}
}

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { leakcheck.Main(m) }
