package server_test

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// serveLocal serves s on a unix socket as its local listener until the
// test ends, and returns the socket's gRPC target.
func serveLocal(t *testing.T, s *servertest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reverie.sock")
	lis, err := server.Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeLocal(lis) }()
	t.Cleanup(func() {
		// servertest's Cleanup, which runs after this one, stops the
		// server; wait for ServeLocal only if it failed early.
		select {
		case err := <-served:
			if !errors.Is(err, server.ErrServerClosed) {
				t.Errorf("ServeLocal: %v", err)
			}
		default:
		}
	})
	return "unix://" + path
}

// A server with TLS and tokens serves the same tables on its local
// socket to clients with neither, as dm-reverb's client is; its network
// listener still asks for both.
func TestLocalListenerSkipsTLSAndTokens(t *testing.T) {
	s := servertest.Start(t, secureConfig(t))
	local := serveLocal(t, s)
	ctx := ctxT(t)

	plain := dialWith(t, local, insecure.NewCredentials())
	keys, err := insertAll(ctx, plain,
		&reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)}, Items: []*reverbpb.PrioritizedItem{item(10, "t", 1, 1, 0, 1)}})
	if err != nil || len(keys) != 1 {
		t.Fatalf("insert on the local socket without TLS or token: %v, %v", keys, err)
	}

	// The same table, seen through the network listener with TLS and a
	// token.
	remote := dialWith(t, s.Addr, credentials.NewTLS(clientTLS(t, false)))
	got, err := sampleN(withToken(ctx, "secret-one"), remote, "t", 1, 5000)
	if err != nil || len(got) == 0 || got[0].GetInfo().GetItem().GetKey() != 10 {
		t.Fatalf("sample over TLS of the item inserted locally: %v, %v", got, err)
	}
	_, err = remote.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unauthenticated, "authorization", "missing")
	_, err = dialWith(t, s.Addr, insecure.NewCredentials()).ServerInfo(withToken(ctx, "secret-one"), &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unavailable)

	// A client that speaks TLS to the local socket gets nowhere: the
	// socket has no handshake.
	_, err = dialWith(t, local, credentials.NewTLS(clientTLS(t, false))).ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unavailable)
}

// Without TLS or tokens the local socket is one more plaintext listener.
func TestLocalListenerPlain(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("t", 100, server.MinSize(1))))
	local := serveLocal(t, s)
	ctx := ctxT(t)
	if _, err := dialWith(t, local, insecure.NewCredentials()).ServerInfo(ctx, &reverbpb.ServerInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dialWith(t, s.Addr, insecure.NewCredentials()).ServerInfo(ctx, &reverbpb.ServerInfoRequest{}); err != nil {
		t.Fatal(err)
	}
}

// ServeLocal refuses a TCP listener: its clients would skip tokens from
// anywhere on the network.
func TestServeLocalRefusesTCP(t *testing.T) {
	s := servertest.Start(t, testConfig(uniformTable("t", 100, server.MinSize(1))))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if err := s.ServeLocal(lis); err == nil || !strings.Contains(err.Error(), "unix socket") {
		t.Fatalf("ServeLocal on TCP: %v", err)
	}
}

func TestLocalListenConfig(t *testing.T) {
	for _, tc := range []struct {
		listen, local, want string
	}{
		{"", "unix:///run/reverie-local.sock", ""},
		{"", "127.0.0.1:9000", "local_listen: want a unix socket"},
		{"", "unix://", "local_listen: unix socket path is empty"},
		{"unix:///run/r.sock", "unix:///run/r.sock", "local_listen: \"unix:///run/r.sock\" is listen too"},
	} {
		cfg := testConfig(uniformTable("t", 100, server.MinSize(1)))
		cfg.Listen, cfg.LocalListen = tc.listen, tc.local
		err := cfg.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.local, err)
			}
			continue
		}
		if !errors.Is(err, server.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.local, err, tc.want)
		}
	}
}
