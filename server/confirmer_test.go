package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/wal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestConfirmerLogFailureIsAStatus: when the write-ahead log fails before
// a key is confirmed, close reports it as a gRPC status (InsertStream
// returns it as it is at a half-close), and sends no key.
func TestConfirmerLogFailureIsAStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{errors.New("no space left on device"), codes.Internal},
		{wal.ErrClosed, codes.Unavailable},
	} {
		sent := 0
		c := newConfirmer(func(*reverbpb.InsertStreamResponse) error { sent++; return nil })
		c.durable = func(uint64) error { return tc.err }
		c.add(1, 1)
		err := c.close()
		if st, ok := status.FromError(err); !ok || st.Code() != tc.code || !strings.Contains(st.Message(), "write-ahead log") {
			t.Errorf("log failure %q: close returned %v, want a %v status naming the write-ahead log", tc.err, err, tc.code)
		}
		if sent != 0 {
			t.Errorf("log failure %q: %d confirmations sent", tc.err, sent)
		}
	}
}

// TestConfirmerBoundsUnsentKeys: behind a send the client does not read,
// waitRoom holds the stream once maxUnsent keys wait, and lets it go on
// once they are taken. The keys used to grow without bound (found by
// review).
func TestConfirmerBoundsUnsentKeys(t *testing.T) {
	release := make(chan struct{})
	c := newConfirmer(func(*reverbpb.InsertStreamResponse) error { <-release; return nil })
	c.maxUnsent = 4
	c.add(1, 0) // taken at once; its send blocks
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		n := len(c.keys)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the confirmer did not take the first key")
		}
	}
	for k := uint64(2); k <= 5; k++ {
		c.add(k, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.waitRoom(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waitRoom with 4 keys behind a blocked send: %v, want it to wait", err)
	}
	closing := make(chan struct{})
	close(closing)
	if err := c.waitRoom(context.Background(), closing); !errors.Is(err, errShuttingDown) {
		t.Fatalf("waitRoom while closing: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.waitRoom(context.Background(), nil) }()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waitRoom did not return once the keys were taken")
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
}
