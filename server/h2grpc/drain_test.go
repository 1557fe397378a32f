package h2grpc

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
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
	connOf(t, srv) // accepted, waiting for the preface
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	time.Sleep(300 * time.Millisecond) // GOAWAY queued, the server's side closed
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
