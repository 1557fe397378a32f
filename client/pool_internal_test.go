package client

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestPoolWaitSeesChangeBeforeWait: a writer that found every server down
// and then waits for a change must not miss one that came between its
// look and its wait (it waited for the next change, forever with a
// Background context, while a server was up).
func TestPoolWaitSeesChangeBeforeWait(t *testing.T) {
	p := &Pool{log: slog.New(slog.NewTextHandler(io.Discard, nil)), delay: time.Millisecond, changed: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	defer p.cancel()
	m := &poolMember{c: &Client{addr: "a"}, since: time.Now(), changed: make(chan struct{})}
	p.members = []*poolMember{m}

	changed := p.changes()
	if _, ok := p.pick(0); ok {
		t.Fatal("the member is up before it came up")
	}
	p.setUp(m, true) // the watcher sees READY between the look and the wait
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.waitChange(ctx, changed, nil); err != nil {
		t.Fatalf("waitChange: %v, though the member came up after the look", err)
	}
	if _, ok := p.pick(0); !ok {
		t.Fatal("the member is not up")
	}
}
