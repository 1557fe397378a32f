// Package servertest starts real reverie servers on loopback for tests, as
// net/http/httptest does for HTTP handlers.
package servertest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Server is a running server and a client connection to it.
type Server struct {
	*server.Server
	// Addr is the loopback address the server listens on.
	Addr string
	// Conn is a client connection to Addr with unlimited message sizes.
	Conn *grpc.ClientConn
	// Client is a ReverbService client over Conn.
	Client reverbpb.ReverbServiceClient
}

// Start serves cfg on 127.0.0.1 on a free port until the test ends. Logs
// are discarded unless cfg.Logger is set.
func Start(t testing.TB, cfg server.Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	s := &Server{Server: srv, Addr: lis.Addr().String()}
	s.Conn = Dial(t, s.Addr)
	s.Client = reverbpb.NewReverbServiceClient(s.Conn)
	t.Cleanup(func() {
		s.Conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("servertest: shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("servertest: Serve returned %v, want ErrServerClosed", err)
		}
	})
	return s
}

// Dial connects to addr without TLS and with unlimited message sizes, as
// Reverb's clients do. The connection is closed when the test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
	)
	if err != nil {
		t.Fatalf("servertest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
