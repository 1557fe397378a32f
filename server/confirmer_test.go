package server

import (
	"errors"
	"strings"
	"testing"

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
