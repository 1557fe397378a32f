package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/reverie-rl/reverie/internal/leakcheck"
)

// startH2 serves the echo's own HTTP/2 server (--h2) on a loopback port
// with the rings of spec until the test ends, and checks that no
// goroutine outlives it. stop closes the listener and returns once every
// connection's goroutine has ended, after which the rings are the
// caller's to read; it may be called more than once.
//
// stop waits for serveH2 to return before waiting on its connections:
// a WaitGroup's first Add must happen before its Wait, and only
// serveH2's return orders its Adds (made as it accepts) before the
// test's goroutine. Bytes over a socket do not, for the race detector.
func startH2(t *testing.T, spec string, ackEvery uint64, readBuf int, handoff bool) (addr string, rs rings, stop func()) {
	t.Helper()
	rs, err := parseRings(spec, false)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	conns := new(sync.WaitGroup)
	go func() { done <- serveH2(lis, rs, ackEvery, readBuf, handoff, conns) }()
	stop = sync.OnceFunc(func() {
		lis.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("serveH2: %v", err)
		}
		// Connection goroutines end when their clients close.
		conns.Wait()
	})
	t.Cleanup(func() {
		// The tests' Cleanups of dialEcho run before this one.
		stop()
		leakcheck.None(t)
	})
	return lis.Addr().String(), rs, stop
}

// bothModes runs f with the HTTP/2 echo answering inline and with
// --handoff.
func bothModes(t *testing.T, f func(t *testing.T, handoff bool)) {
	t.Run("inline", func(t *testing.T) { f(t, false) })
	t.Run("handoff", func(t *testing.T) { f(t, true) })
}

// dialEcho is a gRPC-Go client connection to addr, as `echo load` makes.
// A test still using it after h2TestDeadline fails, and the connection
// is closed, which ends its calls: a server that stops granting flow
// control would otherwise leave an insert stream's sends (which ignore
// their context, as upClient's do) blocked until go test's own timeout.
func dialEcho(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32),
			grpc.ForceCodecV2(newBytesCodec(nil))))
	if err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(h2TestDeadline, func() {
		t.Errorf("still running after %v: closing the client connection", h2TestDeadline)
		cc.Close()
	})
	t.Cleanup(func() {
		watchdog.Stop()
		cc.Close()
	})
	return cc
}

// h2TestDeadline bounds each HTTP/2 echo test; they take well under a
// second each.
const h2TestDeadline = 30 * time.Second

// Every payload sent to the HTTP/2 echo lands in the ring and is
// acknowledged, though the server acknowledges only every 7, with
// payloads within one frame and spanning several, and read buffers
// smaller and larger than a frame.
func TestH2InsertFillsRing(t *testing.T) {
	bothModes(t, func(t *testing.T, handoff bool) {
		for _, tc := range []struct {
			name    string
			payload int
			readBuf int
		}{
			{"100B", 100, 32 << 10},
			{"40kB", 40000, 32 << 10},
			{"40kB read buffer 4KiB", 40000, 4 << 10},
		} {
			t.Run(tc.name, func(t *testing.T) {
				addr, rs, stop := startH2(t, "100:10,40000:10", 7, tc.readBuf, handoff)
				cc := dialEcho(t, addr)
				// More than a stream's receive window, so that window updates
				// are needed.
				want := 1
				if tc.payload > 1000 {
					want = 2 * h2StreamWindow / tc.payload
				}
				ctx, progress := loadWindow(t, 300*time.Millisecond, want)
				c := &loadConfig{payload: tc.payload, maxInFlight: 16, progress: progress[0]}
				lat, err := upClient(ctx, cc, c, 3)
				if err != nil {
					t.Fatal(err)
				}
				if len(lat) < want {
					t.Fatalf("%d payloads acknowledged, want at least %d", len(lat), want)
				}
				// Once the server has let go of the connection, the ring is
				// the test's to read.
				cc.Close()
				stop()
				r := rs[tc.payload]
				if got := r.next.Load(); got != uint64(len(lat)) {
					t.Fatalf("the ring took %d payloads, the client saw %d acknowledged", got, len(lat))
				}
				sent := map[string]bool{}
				for i := range 8 {
					sent[string(randomBytes(tc.payload, 3*100+uint64(i)))] = true
				}
				for i := range r.slots {
					if slot := r.buf[i*r.size : (i+1)*r.size]; !sent[string(slot)] {
						t.Fatalf("slot %d holds bytes the client did not send", i)
					}
				}
			})
		}
	})
}

// A sample response is the requested number of ring slots, whole, though
// it is many times the client's first flow-control window; the stream
// ends with status OK when the client closes its side.
func TestH2SampleFromRing(t *testing.T) {
	bothModes(t, func(t *testing.T, handoff bool) {
		addr, rs, _ := startH2(t, "40000:8", 1, 32<<10, handoff)
		cc := dialEcho(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, downDesc, "/"+serviceName+"/Down")
		if err != nil {
			t.Fatal(err)
		}
		r := rs[40000]
		for range 3 {
			if err := st.SendMsg(wrapperspb.UInt64(40000<<16 | 16)); err != nil {
				t.Fatal(err)
			}
			m := new(wrapperspb.BytesValue)
			if err := st.RecvMsg(m); err != nil {
				t.Fatal(err)
			}
			if len(m.Value) != 16*40000 {
				t.Fatalf("got %d bytes, want %d", len(m.Value), 16*40000)
			}
			for k := range 16 {
				got := m.Value[k*40000 : (k+1)*40000]
				found := false
				for i := range r.slots {
					found = found || bytes.Equal(got, r.buf[i*40000:(i+1)*40000])
				}
				if !found {
					t.Fatalf("payload %d of the response is no slot of the ring", k)
				}
			}
		}
		st.CloseSend()
		if err := st.RecvMsg(new(wrapperspb.BytesValue)); err != io.EOF {
			t.Fatalf("after CloseSend: %v, want io.EOF (status OK)", err)
		}

		// Without a ring: one cached payload, repeated.
		lctx, progress := loadWindow(t, 100*time.Millisecond, 1)
		c := &loadConfig{payload: 500, inFlight: 4, progress: progress[0]}
		if lat, err := downClient(lctx, cc, c); err != nil || len(lat) == 0 {
			t.Fatalf("downClient: %d takes, %v", len(lat), err)
		}
	})
}

// Streams share a connection: four insert streams and a sample stream at
// once, each served in full, none starved: the run lasts until each has
// made progress.
func TestH2Streams(t *testing.T) {
	bothModes(t, func(t *testing.T, handoff bool) {
		addr, _, _ := startH2(t, "", 3, 32<<10, handoff)
		cc := dialEcho(t, addr)
		ctx, progress := loadWindow(t, 200*time.Millisecond, 1, 1, 1, 1, 1)
		var wg sync.WaitGroup
		errs := make([]error, 5)
		for i := range 4 {
			wg.Go(func() {
				lat, err := upClient(ctx, cc, &loadConfig{payload: 20000 + i, maxInFlight: 32, progress: progress[i]}, uint64(i))
				if err == nil && len(lat) == 0 {
					err = errors.New("nothing acknowledged")
				}
				errs[i] = err
			})
		}
		wg.Go(func() {
			lat, err := downClient(ctx, cc, &loadConfig{payload: 30000, inFlight: 8, progress: progress[4]})
			if err == nil && len(lat) == 0 {
				err = errors.New("nothing taken")
			}
			errs[4] = err
		})
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("stream %d: %v", i, err)
			}
		}
	})
}

// A bad call ends with a gRPC status that says what is wrong, and the
// connection goes on serving; a connection that does not speak HTTP/2 is
// closed.
func TestH2BadInput(t *testing.T) {
	bothModes(t, func(t *testing.T, handoff bool) {
		addr, _, _ := startH2(t, "", 1, 32<<10, handoff)
		cc := dialEcho(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		call := func(method string, msg any) error {
			st, err := cc.NewStream(ctx, downDesc, "/"+serviceName+"/"+method)
			if err != nil {
				return err
			}
			if err := st.SendMsg(msg); err != nil && err != io.EOF {
				return err
			}
			return st.RecvMsg(new(wrapperspb.BytesValue))
		}
		for _, tc := range []struct {
			name, method string
			msg          any
			code         codes.Code
			want         string
		}{
			{"unknown method", "Sideways", wrapperspb.UInt64(1), codes.Unimplemented, "unknown method"},
			{"zero payloads", "Down", wrapperspb.UInt64(8 << 16), codes.InvalidArgument, "request of 0 payloads"},
			{"oversized response", "Down", wrapperspb.UInt64(0xffff<<16 | 0xffff), codes.InvalidArgument, "request of 65535 payloads"},
			{"not a request", "Down", wrapperspb.String("sixteen bytes and more"), codes.InvalidArgument, "request of 24 bytes"},
			{"not a payload", "Up", wrapperspb.UInt64(7), codes.InvalidArgument, "want a BytesValue"},
		} {
			err := call(tc.method, tc.msg)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("%s: %v; want %v with %q", tc.name, err, tc.code, tc.want)
			}
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Errorf("a connection that is not HTTP/2: %v; want it closed", err)
		}
		lctx, progress := loadWindow(t, 50*time.Millisecond, 1)
		c := &loadConfig{payload: 10, inFlight: 2, progress: progress[0]}
		if lat, err := downClient(lctx, cc, c); err != nil || len(lat) == 0 {
			t.Fatalf("after the bad calls: %d takes, %v", len(lat), err)
		}
	})
}

// A client that cancels a stream in the middle of a response resets it;
// the connection serves the next stream whole.
func TestH2Cancel(t *testing.T) {
	bothModes(t, func(t *testing.T, handoff bool) {
		addr, _, _ := startH2(t, "40000:8", 1, 32<<10, handoff)
		cc := dialEcho(t, addr)
		for round := range 3 {
			ctx, cancel := context.WithCancel(context.Background())
			st, err := cc.NewStream(ctx, downDesc, "/"+serviceName+"/Down")
			if err != nil {
				t.Fatal(err)
			}
			// 2.5 MB, many windows: the server is mid-response when the
			// client cancels.
			if err := st.SendMsg(wrapperspb.UInt64(40000<<16 | 64)); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := st.RecvMsg(new(wrapperspb.BytesValue)); status.Code(err) != codes.Canceled {
				t.Fatalf("round %d: cancelled stream: %v", round, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(ctx, downDesc, "/"+serviceName+"/Down")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(wrapperspb.UInt64(40000<<16 | 64)); err != nil {
			t.Fatal(err)
		}
		m := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(m); err != nil || len(m.Value) != 64*40000 {
			t.Fatalf("after the cancelled streams: %d bytes, %v", len(m.Value), err)
		}
	})
}
