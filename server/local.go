package server

import (
	"context"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// The local listener (Config.LocalListen, Server.ServeLocal) is a unix
// socket beside the main listener, on the same gRPC server and so the same
// tables. Its connections skip TLS and tokens: Reverb's own client
// (dm-reverb, and so Acme and TF-Agents) speaks only plaintext and sends no
// token, and actors on the server's machine can reach a TLS- and
// token-protected server through it. Who may connect is decided by the
// socket file's permissions (0660: its owner and group; see
// docs/config.md).

// localListener marks each connection it accepts as local.
type localListener struct{ net.Listener }

func (l localListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return localConn{c}, nil
}

type localConn struct{ net.Conn }

// localAuthInfo is the AuthInfo of a local connection; the token check
// lets its calls through.
type localAuthInfo struct{ credentials.CommonAuthInfo }

func (localAuthInfo) AuthType() string { return "local" }

// localCreds are the server's transport credentials (TLS, or none) for
// every connection but local ones, which get no handshake.
type localCreds struct {
	credentials.TransportCredentials
}

func newLocalCreds(inner credentials.TransportCredentials) localCreds {
	if inner == nil {
		inner = insecure.NewCredentials()
	}
	return localCreds{inner}
}

func (c localCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if lc, ok := conn.(localConn); ok {
		// A unix socket does not leave the machine.
		return lc.Conn, localAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c localCreds) Clone() credentials.TransportCredentials {
	return localCreds{c.TransportCredentials.Clone()}
}

// isLocal reports whether ctx is a call on the local listener.
func isLocal(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	_, local := p.AuthInfo.(localAuthInfo)
	return local
}

// checkLocalListen returns what is wrong with addr as a local listener,
// or "".
func checkLocalListen(addr string) string {
	if addr == "" {
		return ""
	}
	path, ok := unixPath(addr)
	if !ok {
		return fmt.Sprintf(`want a unix socket, "unix:///path/to/sock", got %q: its clients skip TLS and tokens, so it must not be reachable from the network`, addr)
	}
	if path == "" {
		return `unix socket path is empty; want "unix:///path/to/sock"`
	}
	return ""
}

// ServeLocal accepts connections on l, a unix socket, until Shutdown or
// Close, then returns ErrServerClosed, as Serve does; it may run beside
// Serve. Calls on l skip TLS and tokens. Any other return is a listener
// failure.
func (s *Server) ServeLocal(l net.Listener) error {
	if n := l.Addr().Network(); !strings.HasPrefix(n, "unix") {
		return fmt.Errorf("server: ServeLocal: want a unix socket listener, got %s %s", n, l.Addr())
	}
	return s.serve(localListener{l}, true)
}
