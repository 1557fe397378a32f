package h2grpc

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func userTimeoutOf(t *testing.T, tc *net.TCPConn) int {
	t.Helper()
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// The server's connections get TCP_USER_TIMEOUT, under TLS too, so that
// the kernel resets one whose client stopped reading (a writer blocked in
// writev on it held it for ever; found by review).
func TestServerConnectionsHaveAUserTimeout(t *testing.T) {
	srv, _, addr := start(t, Options{})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	var server *net.TCPConn
	for server == nil {
		srv.mu.Lock()
		for c := range srv.conns {
			server, _ = c.nc.(*net.TCPConn)
		}
		srv.mu.Unlock()
		if server == nil && time.Now().After(deadline) {
			t.Fatal("the server's side of the connection was not found")
		}
		time.Sleep(time.Millisecond)
	}
	if got := userTimeoutOf(t, server); got != int(userTimeout/time.Millisecond) {
		t.Fatalf("TCP_USER_TIMEOUT %d ms, want %d", got, userTimeout/time.Millisecond)
	}

	// Under TLS: the TCP connection beneath.
	a, b := tcpPair(t)
	setUserTimeout(tls.Server(a, &tls.Config{}), userTimeout)
	if got := userTimeoutOf(t, a); got != int(userTimeout/time.Millisecond) {
		t.Fatalf("under TLS: TCP_USER_TIMEOUT %d ms, want %d", got, userTimeout/time.Millisecond)
	}
	b.Close()
}

func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}
