package server

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// flakyListener fails its first Accept as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	failed bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestMultiListenerTemporaryError: a temporary accept error on one of the
// loopback listeners is returned (gRPC backs off and retries) and leaves
// both open; it used to close them, which ended the server.
func TestMultiListenerTemporaryError(t *testing.T) {
	a, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := newMultiListener(&flakyListener{Listener: a}, b)
	defer m.Close()
	if _, err := m.Accept(); !isTemporary(err) {
		t.Fatalf("first Accept: %v, want the temporary error", err)
	}
	for _, l := range []net.Listener{a, b} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, err := m.Accept()
		if err != nil {
			t.Fatalf("Accept after a temporary error: %v", err)
		}
		got.Close()
	}
}
