package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Listen opens the listener for addr: "unix:///path/sock" (or
// "unix:/path/sock") for a unix socket, anything else for TCP, where ":port"
// listens on every interface, IPv4 and IPv6 (dual stack), as the Python
// client's "localhost:PORT" needs. A stale unix socket file that nobody
// listens on is removed first.
func Listen(addr string) (net.Listener, error) {
	if path, ok := unixPath(addr); ok {
		if err := removeStaleSocket(path); err != nil {
			return nil, err
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

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
