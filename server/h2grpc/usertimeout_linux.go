package h2grpc

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT on nc's socket (when it is a TCP
// one, under TLS or not): the kernel resets a connection whose sent data
// has gone unacknowledged for d, so a client that stops reading with a
// full window (or a host gone away) does not hold the connection, its
// writer and everything queued for it for ever. gRPC-Go's server does
// the same with its keepalive timeout (20 s by default).
func setUserTimeout(nc net.Conn, d time.Duration) {
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = u.NetConn()
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
}
