package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/selector"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func startServer(t *testing.T) string {
	t.Helper()
	s := servertest.Start(t, server.Config{Tables: []server.TableConfig{{
		Name:        "t",
		Sampler:     selector.Spec{Kind: selector.KindUniform},
		Remover:     selector.Spec{Kind: selector.KindFIFO},
		MaxSize:     200,
		RateLimiter: server.MinSize(1),
	}}})
	return s.Addr
}

func testOptions(addr, table string) options {
	o, err := parseFlags([]string{"--addr", addr, "--table", table, "--duration", "1500ms",
		"--workers", "4", "--payloads", "16,400,40000", "--report", "1h"})
	if err != nil {
		panic(err)
	}
	return o
}

// A short churn against a real server writes, samples every payload
// intact and finds nothing wrong.
func TestChurn(t *testing.T) {
	var out bytes.Buffer
	if err := run(testOptions(startServer(t), "t"), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "churn: ok") {
		t.Fatalf("no verdict:\n%s", out.String())
	}
}

// Errors churn did not cause fail the run: every call to a table the
// server does not have is one.
func TestChurnReportsUnexpectedErrors(t *testing.T) {
	var out bytes.Buffer
	err := run(testOptions(startServer(t), "missing"), &out)
	if err == nil || !strings.Contains(err.Error(), "unexpected errors") {
		t.Fatalf("run against a missing table: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "missing") {
		t.Errorf("the report does not name the failing table:\n%s", out.String())
	}
}

// A payload changed anywhere after fill no longer passes intact.
func TestPayloadHash(t *testing.T) {
	ch := &churn{seed: maphash.MakeSeed()}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{16, 17, 400, 40000} {
		buf := make([]byte, n)
		ch.fill(buf, rng)
		if !ch.intact(buf) {
			t.Fatalf("%d bytes: a fresh payload is not intact", n)
		}
		for _, i := range []int{0, 8, n / 2, n - 1} {
			buf[i] ^= 1
			if ch.intact(buf) {
				t.Fatalf("%d bytes: flipping a bit of byte %d went unnoticed", n, i)
			}
			buf[i] ^= 1
		}
		if ch.intact(buf[:n-1]) {
			t.Fatalf("%d bytes: a truncated payload passed", n)
		}
	}
}

func TestParseFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--payloads", "8"},
		{"--payloads", "400,x"},
		{"--workers", "0"},
		{"--duration", "0s"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	o, err := parseFlags([]string{"--duration", "2m"})
	if err != nil || o.duration != 2*time.Minute || len(o.payloads) != 4 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
}

// A DEADLINE_EXCEEDED from the server at the run's deadline is the run
// ending, even before this process's own timer has fired, whether the
// client returns it as the status or as context.DeadlineExceeded; earlier,
// or with another code, it is not.
func TestEndedByServer(t *testing.T) {
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	running, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{ended, deadline, true},
		{ended, context.DeadlineExceeded, true},
		{ended, fmt.Errorf("flush: %w", context.DeadlineExceeded), true},
		{running, deadline, false},
		{running, context.DeadlineExceeded, false},
		{ended, status.Error(codes.Unavailable, "gone"), false},
		{context.Background(), deadline, false},
	} {
		if got := endedByServer(c.ctx, c.err); got != c.want {
			dl, ok := c.ctx.Deadline()
			t.Errorf("endedByServer(deadline %v (%v), %v) = %v, want %v", time.Until(dl).Round(time.Second), ok, c.err, got, c.want)
		}
	}
}
