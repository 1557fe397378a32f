//go:build !linux

package h2grpc

import (
	"net"
	"time"
)

// setUserTimeout is a no-op where TCP_USER_TIMEOUT does not exist.
func setUserTimeout(net.Conn, time.Duration) {}
