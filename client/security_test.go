package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/client"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
)

func testTLS(t *testing.T) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile("../testdata/tls/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: roots}
}

// WithTLS and WithToken reach a server that asks for both; without the
// token, calls fail with ErrUnauthenticated, which writers do not retry.
func TestTLSAndToken(t *testing.T) {
	cfg := server.Config{Tables: []server.TableConfig{uniformTable("t")}}
	cfg.TLS = server.TLSConfig{CertFile: "../testdata/tls/server.pem", KeyFile: "../testdata/tls/server.key"}
	cfg.Auth = server.AuthConfig{Tokens: []string{"s3cret"}}
	s := servertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c := dial(t, s.Addr, client.WithTLS(testTLS(t)), client.WithToken("s3cret"))
	if _, err := c.ServerInfo(ctx); err != nil {
		t.Fatalf("ServerInfo with TLS and the token: %v", err)
	}

	anon := dial(t, s.Addr, client.WithTLS(testTLS(t)))
	if _, err := anon.ServerInfo(ctx); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("ServerInfo without a token: %v, want ErrUnauthenticated", err)
	}
	w, err := anon.NewTrajectoryWriter(ctx, client.WriterOptions{NumKeepAliveRefs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(ctx, map[string]client.Tensor{"obs": wtObs(0)}); err != nil {
		t.Fatal(err)
	}
	err = w.CreateItem(ctx, "t", 1, []client.TrajectoryColumn{w.History("obs").Last(1)})
	if err == nil {
		err = w.Flush(ctx)
	}
	if !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("a writer without a token: %v, want ErrUnauthenticated", err)
	}

	// A token over plaintext is refused before anything is sent.
	if _, err := client.Dial(ctx, s.Addr, client.WithToken("s3cret")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Dial with a token and no TLS: %v, want ErrInvalidArgument", err)
	}
}

// Dialling a TLS server in plaintext fails with a hint at TLS.
func TestDialPlaintextToTLS(t *testing.T) {
	cfg := server.Config{Tables: []server.TableConfig{uniformTable("t")}}
	cfg.TLS = server.TLSConfig{CertFile: "../testdata/tls/server.pem", KeyFile: "../testdata/tls/server.key"}
	s := servertest.Start(t, cfg)
	// Dial adds the hint only if the connection has failed by the time its
	// context ends, so leave a loaded machine time for the first attempt.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := client.Dial(ctx, s.Addr)
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "it may want TLS") {
		t.Fatalf("Dial in plaintext: %v", err)
	}
}
