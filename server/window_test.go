package server_test

import (
	"net"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"golang.org/x/net/http2"
)

// TestFlowControlWindows reads what the server grants a new HTTP/2
// connection: a stream window of StreamWindowBytes in its SETTINGS and a
// connection window raised to ConnWindowBytes, fixed, rather than gRPC's
// per-connection estimate that starved some writers of a busy server.
func TestFlowControlWindows(t *testing.T) {
	s := servertest.Start(t, testConfig(server.QueueTable("queue", 1)))
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server sends its SETTINGS and the connection's WINDOW_UPDATE at
	// once; a server without the update is caught by the deadline.
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	streamWindow, connWindow := uint32(0), uint32(65535) // HTTP/2's initial connection window
	gotSettings, gotUpdate := false, false
	for !gotSettings || !gotUpdate {
		f, err := fr.ReadFrame()
		if err != nil && gotSettings {
			break
		}
		if err != nil {
			t.Fatalf("reading the server's frames: %v (settings %v, window update %v)", err, gotSettings, gotUpdate)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			gotSettings = true
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				streamWindow = v
			}
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				gotUpdate = true
				connWindow += f.Increment
			}
		}
	}
	if streamWindow != server.StreamWindowBytes {
		t.Errorf("stream window %d, want %d", streamWindow, server.StreamWindowBytes)
	}
	if connWindow != server.ConnWindowBytes {
		t.Errorf("connection window %d, want %d", connWindow, server.ConnWindowBytes)
	}
}
