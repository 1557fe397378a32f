package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Listen opens the listener for addr:
//
//   - "unix:///path/sock" (or "unix:/path/sock"): a unix socket; a stale
//     socket file that nobody listens on is removed first;
//   - ":port": every interface, IPv4 and IPv6 (dual stack), as Reverb binds;
//   - "localhost:port": both loopback addresses, 127.0.0.1 and ::1, on the
//     same port (port 0 picks one free on both), so that clients that
//     resolve "localhost" to both, as Reverb's Python client does, reach
//     the server either way while nothing outside the host can;
//   - anything else: that TCP address.
func Listen(addr string) (net.Listener, error) {
	if path, ok := unixPath(addr); ok {
		if err := removeStaleSocket(path); err != nil {
			return nil, err
		}
		return net.Listen("unix", path)
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "localhost" {
		return listenLoopback(port)
	}
	return net.Listen("tcp", addr)
}

// listenLoopback listens on 127.0.0.1:port and, when the host has IPv6, on
// [::1] at the same port.
func listenLoopback(port string) (net.Listener, error) {
	for attempt := 0; ; attempt++ {
		v4, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			return nil, err
		}
		p := strconv.Itoa(v4.Addr().(*net.TCPAddr).Port)
		v6, err := net.Listen("tcp", net.JoinHostPort("::1", p))
		if err == nil {
			return newMultiListener(v4, v6), nil
		}
		v4.Close()
		if !isAddrInUse(err) {
			// No IPv6 loopback on this host: IPv4 alone.
			return net.Listen("tcp", net.JoinHostPort("127.0.0.1", p))
		}
		if port != "0" || attempt == 10 {
			return nil, err
		}
		// The free IPv4 port is taken on IPv6; pick another.
	}
}

func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

// multiListener accepts from several listeners; Addr is the first one's.
type multiListener struct {
	ls     []net.Listener
	conns  chan net.Conn
	errs   chan error
	closed chan struct{}
	once   sync.Once
}

func newMultiListener(ls ...net.Listener) *multiListener {
	m := &multiListener{ls: ls, conns: make(chan net.Conn), errs: make(chan error, len(ls)), closed: make(chan struct{})}
	for _, l := range ls {
		go m.accept(l)
	}
	return m
}

func (m *multiListener) accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case m.errs <- err:
			case <-m.closed:
				return
			}
			if isTemporary(err) {
				continue // as gRPC does: it backs off and calls Accept again
			}
			return
		}
		select {
		case m.conns <- c:
		case <-m.closed:
			c.Close()
			return
		}
	}
}

func (m *multiListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.closed:
		return nil, net.ErrClosed
	case err := <-m.errs:
		// A temporary error (out of file descriptors) leaves both
		// listeners open: the server retries. Any other ends them.
		if !isTemporary(err) {
			m.Close()
		}
		return nil, err
	}
}

// isTemporary reports whether err is an accept error worth retrying, by
// the test gRPC's server applies.
func isTemporary(err error) bool {
	var te interface{ Temporary() bool }
	return errors.As(err, &te) && te.Temporary()
}

func (m *multiListener) Close() error {
	m.once.Do(func() {
		close(m.closed)
		for _, l := range m.ls {
			l.Close()
		}
	})
	return nil
}

func (m *multiListener) Addr() net.Addr { return m.ls[0].Addr() }

// ListenAddr is the address Listen should open for cfg.
func (c *Config) ListenAddr() string {
	if c.Listen != "" {
		return c.Listen
	}
	return fmt.Sprintf(":%d", c.Port)
}

func unixPath(addr string) (string, bool) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		return strings.TrimPrefix(addr, "unix://"), true
	case strings.HasPrefix(addr, "unix:"):
		return strings.TrimPrefix(addr, "unix:"), true
	}
	return "", false
}

func removeStaleSocket(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("server: %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("server: %s: another server is listening", path)
	}
	return os.Remove(path)
}
