package h2grpc

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// connOf waits for srv's only connection.
func connOf(t *testing.T, srv *Server) *conn {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		srv.mu.Lock()
		for c := range srv.conns {
			srv.mu.Unlock()
			return c
		}
		srv.mu.Unlock()
	}
	t.Fatal("no connection")
	return nil
}

// locked returns f's answer, asked with c.mu held: for tests that wait on
// the connection's state.
func (c *conn) locked(f func() bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f()
}

// GracefulStop reaches a connection whose client has not sent its preface
// yet. The server's SETTINGS still come first, then GOAWAY; and a preface
// that arrives after the drain must not lift the linger deadline, or a
// client that then sends nothing holds GracefulStop for ever (it did,
// before the fix: found by review).
func TestGracefulStopBeforePreface(t *testing.T) {
	srv, _, addr := start(t, Options{})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := connOf(t, srv) // accepted, waiting for the preface
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	// The preface must come after the drain (GOAWAY queued), however
	// slowly GracefulStop reaches the connection.
	for deadline := time.Now().Add(5 * time.Second); !c.locked(func() bool { return c.draining }); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("GracefulStop did not drain the connection within 5 s")
		}
	}
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nil, nc)
	var types []http2.FrameType
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // EOF: the server closed its side after GOAWAY
		}
		types = append(types, f.Header().Type)
	}
	if len(types) < 2 || types[0] != http2.FrameSettings || types[len(types)-1] != http2.FrameGoAway {
		t.Errorf("frames %v, want SETTINGS first and GOAWAY last", types)
	}
	select {
	case <-stopped:
	case <-time.After(drainLinger + 3*time.Second):
		t.Errorf("GracefulStop still waiting %v after the drain (linger %v)", drainLinger+3*time.Second, drainLinger)
		nc.Close()
		<-stopped
	}
}

// bigDesc's Get answers every call at once with 512 KiB.
var bigDesc = grpc.ServiceDesc{
	ServiceName: "h2grpc.test.Big",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Get",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(wrapperspb.BytesValue)); err != nil {
				return nil, err
			}
			return wrapperspb.Bytes(make([]byte, 512<<10)), nil
		},
	}},
}

// startBig serves bigDesc alone with opts on loopback until the test
// ends.
func startBig(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	srv := NewServer(opts)
	srv.RegisterService(&bigDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-served })
	return srv, lis.Addr().String()
}

// A client that grants no window and opens calls that are answered at once
// leaves each answer queued on a stream whose handler has returned. Those
// streams count against MaxConcurrentStreams until they are flushed:
// before, only running handlers counted, and such a client made the
// server hold any number of answers (found by review).
func TestUnflushedStreamsCountAgainstLimit(t *testing.T) {
	const limit = 4
	srv, addr := startBig(t, Options{MaxConcurrentStreams: limit})
	c := dialRaw(t, addr)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	conn := connOf(t, srv)
	const calls = 40
	for i := range calls {
		id := uint32(2*i + 1)
		c.headers(id, "/h2grpc.test.Big/Get", false)
		if err := c.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		// Let the handler return before the next call, so that the limit
		// on running handlers alone would refuse none.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			conn.mu.Lock()
			n := len(conn.streams)
			conn.mu.Unlock()
			if conn.running.Load() == 0 && n >= min(i+1, limit) {
				break
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // the last calls' headers read
	conn.mu.Lock()
	n, held := len(conn.streams), 0
	for _, s := range conn.streams {
		held += s.sendLeft
	}
	conn.mu.Unlock()
	if n > limit {
		t.Errorf("%d streams open with MaxConcurrentStreams %d, holding %d KiB of answers", n, limit, held>>10)
	}
}

// A stream accepted just before a drain is counted by the drain's GOAWAY,
// so it must be served: the connection may not close as idle while the
// stream is between acceptance and opening, whether the drain finds no
// stream open or the last open one ends meanwhile. Before the fix, the
// writer closed the connection there and the answer was lost (found by
// review; the second case by rereading the fix).
func TestDrainWhileOpening(t *testing.T) {
	for _, lastEnds := range []bool{false, true} {
		t.Run(fmt.Sprintf("last open stream ends=%v", lastEnds), func(t *testing.T) {
			echo := uint32(1)
			if lastEnds {
				echo = 3
			}
			testHookAccepted = func(c *conn) {
				if c.lastID != echo {
					return
				}
				c.drain()
				if lastEnds {
					// As if stream 1's handler had returned.
					c.mu.Lock()
					c.closeStream(c.streams[1], status.New(codes.Canceled, "test: the last open stream ends"))
					c.mu.Unlock()
				}
				time.Sleep(100 * time.Millisecond) // the writer's turn
			}
			t.Cleanup(func() { testHookAccepted = nil }) // after the server's Stop
			_, _, addr := start(t, Options{})
			c := dialRaw(t, addr)
			if lastEnds {
				c.headers(1, "/"+svcName+"/Block", false)
			}
			c.headers(echo, "/"+svcName+"/Echo", false)
			c.fr.WriteData(echo, true, []byte{0, 0, 0, 0, 0}) // an empty message
			var goAway *http2.GoAwayFrame
			var answered bool
			for {
				f, err := c.fr.ReadFrame()
				if err != nil {
					break // the server closed its side
				}
				switch f := f.(type) {
				case *http2.GoAwayFrame:
					goAway = f
				case *http2.MetaHeadersFrame:
					if f.StreamID == echo && f.StreamEnded() {
						for _, hf := range f.Fields {
							answered = answered || hf.Name == "grpc-status" && hf.Value == "0"
						}
					}
				}
			}
			if goAway == nil || goAway.LastStreamID != echo {
				t.Fatalf("GOAWAY %v, want one counting stream %d", goAway, echo)
			}
			if !answered {
				t.Errorf("stream %d, counted by GOAWAY, was not answered with status OK", echo)
			}
		})
	}
}
