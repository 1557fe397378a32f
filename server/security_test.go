package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/server"
	"github.com/reverie-rl/reverie/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// The test certificates (testdata/tls at the repository's root): a CA,
// a server certificate for localhost, 127.0.0.1 and ::1, and a client
// certificate, all signed by the CA and valid until 2126.
const tlsDir = "../testdata/tls"

func tlsFile(name string) string { return filepath.Join(tlsDir, name) }

func clientTLS(t *testing.T, withCert bool) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(tlsFile("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: roots}
	if withCert {
		cert, err := tls.LoadX509KeyPair(tlsFile("client.pem"), tlsFile("client.key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func dialWith(t *testing.T, addr string, creds credentials.TransportCredentials) reverbpb.ReverbServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return reverbpb.NewReverbServiceClient(conn)
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func secureConfig(t *testing.T) server.Config {
	cfg := testConfig(uniformTable("t", 100, server.MinSize(1)))
	cfg.TLS = server.TLSConfig{CertFile: tlsFile("server.pem"), KeyFile: tlsFile("server.key")}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# learners\nsecret-one\n\n  secret-two  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Auth = server.AuthConfig{TokenFile: tokens}
	return cfg
}

func TestTLSAndTokens(t *testing.T) {
	s := servertest.Start(t, secureConfig(t))
	ctx := ctxT(t)
	c := dialWith(t, s.Addr, credentials.NewTLS(clientTLS(t, false)))

	for _, tok := range []string{"secret-one", "secret-two"} {
		if _, err := c.ServerInfo(withToken(ctx, tok), &reverbpb.ServerInfoRequest{}); err != nil {
			t.Fatalf("token %q: %v", tok, err)
		}
	}
	_, err := c.ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unauthenticated, "authorization", "missing")
	_, err = c.ServerInfo(withToken(ctx, "secret-three"), &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unauthenticated, "authorization", "not one this server accepts")
	_, err = c.ServerInfo(metadata.AppendToOutgoingContext(ctx, "authorization", "secret-one"), &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unauthenticated, "Bearer")

	// Streams are checked when they open: nothing is inserted without a
	// token, and the stream fails on its first receive.
	st, err := c.InsertStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantCode(t, err, codes.Unauthenticated, "authorization")
	keys, err := insertAll(withToken(ctx, "secret-one"), c,
		&reverbpb.InsertStreamRequest{Chunks: []*reverbpb.ChunkData{chunk(1, 1, 1)}, Items: []*reverbpb.PrioritizedItem{item(10, "t", 1, 1, 0, 1)}})
	if err != nil || len(keys) != 1 {
		t.Fatalf("insert with a token: %v, %v", keys, err)
	}
	if got, err := sampleN(withToken(ctx, "secret-two"), c, "t", 1, 5000); err != nil || len(got) == 0 {
		t.Fatalf("sample with a token: %v", err)
	}

	// Health checks need no token.
	h := healthpb.NewHealthClient(grpcConn(t, s.Addr, credentials.NewTLS(clientTLS(t, false))))
	if r, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check without a token: %v, %v", r, err)
	}

	// Plaintext gets nowhere.
	_, err = dialWith(t, s.Addr, insecure.NewCredentials()).ServerInfo(withToken(ctx, "secret-one"), &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unavailable)
}

func grpcConn(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestMutualTLS(t *testing.T) {
	cfg := testConfig(uniformTable("t", 100, server.MinSize(1)))
	cfg.TLS = server.TLSConfig{CertFile: tlsFile("server.pem"), KeyFile: tlsFile("server.key"), ClientCAFile: tlsFile("ca.pem")}
	s := servertest.Start(t, cfg)
	ctx := ctxT(t)
	if _, err := dialWith(t, s.Addr, credentials.NewTLS(clientTLS(t, true))).ServerInfo(ctx, &reverbpb.ServerInfoRequest{}); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	_, err := dialWith(t, s.Addr, credentials.NewTLS(clientTLS(t, false))).ServerInfo(ctx, &reverbpb.ServerInfoRequest{})
	wantCode(t, err, codes.Unavailable)
}

// Bad TLS and token settings stop New with an error that names the field.
func TestSecurityConfigErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spaced := filepath.Join(t.TempDir(), "spaced")
	if err := os.WriteFile(spaced, []byte("two words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		tls  server.TLSConfig
		auth server.AuthConfig
		want string
	}{
		"cert without key":   {tls: server.TLSConfig{CertFile: tlsFile("server.pem")}, want: "tls: cert_file and key_file go together"},
		"client CA alone":    {tls: server.TLSConfig{ClientCAFile: tlsFile("ca.pem")}, want: "tls: cert_file and key_file go together"},
		"missing cert":       {tls: server.TLSConfig{CertFile: "nonexistent.pem", KeyFile: tlsFile("server.key")}, want: "tls.cert_file, tls.key_file"},
		"key of another":     {tls: server.TLSConfig{CertFile: tlsFile("server.pem"), KeyFile: tlsFile("client.key")}, want: "tls.cert_file, tls.key_file"},
		"client CA not PEM":  {tls: server.TLSConfig{CertFile: tlsFile("server.pem"), KeyFile: tlsFile("server.key"), ClientCAFile: empty}, want: "tls.client_ca_file"},
		"missing token file": {auth: server.AuthConfig{TokenFile: "nonexistent"}, want: "auth.token_file"},
		"empty token file":   {auth: server.AuthConfig{TokenFile: empty}, want: "holds no token"},
		"token with a space": {auth: server.AuthConfig{TokenFile: spaced}, want: "spaced:1"},
		"empty token":        {auth: server.AuthConfig{Tokens: []string{""}}, want: "auth.tokens[0]: empty token"},
	} {
		cfg := testConfig(uniformTable("t", 100, server.MinSize(1)))
		cfg.TLS, cfg.Auth = tc.tls, tc.auth
		_, err := server.New(cfg)
		if !errors.Is(err, server.ErrInvalidConfig) || !contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrInvalidConfig mentioning %q", name, err, tc.want)
		}
	}
}

// selfSigned writes a new self-signed certificate for 127.0.0.1 and its
// key to certFile and keyFile, and returns a client config trusting it.
func selfSigned(t *testing.T, certFile, keyFile string) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "rotated"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{RootCAs: roots}
}

// ReloadSecurity takes rotated tokens and certificates without a restart,
// and changes nothing when a file is bad.
func TestReloadSecurity(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, tokens := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "tokens")
	for src, dst := range map[string]string{"server.pem": certFile, "server.key": keyFile} {
		data, err := os.ReadFile(tlsFile(src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokens, "alpha\n")
	cfg := testConfig(uniformTable("t", 100, server.MinSize(1)))
	cfg.TLS = server.TLSConfig{CertFile: certFile, KeyFile: keyFile}
	cfg.Auth = server.AuthConfig{TokenFile: tokens}
	s := servertest.Start(t, cfg)
	ctx := ctxT(t)
	old := dialWith(t, s.Addr, credentials.NewTLS(clientTLS(t, false)))
	call := func(c reverbpb.ReverbServiceClient, tok string) error {
		_, err := c.ServerInfo(withToken(ctx, tok), &reverbpb.ServerInfoRequest{})
		return err
	}
	if err := call(old, "alpha"); err != nil {
		t.Fatal(err)
	}

	write(tokens, "gamma\n")
	if err := s.ReloadSecurity(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, call(old, "alpha"), codes.Unauthenticated)
	if err := call(old, "gamma"); err != nil {
		t.Fatalf("the new token on an open connection: %v", err)
	}

	// A bad file changes nothing.
	write(tokens, "# none\n")
	if err := s.ReloadSecurity(); !errors.Is(err, server.ErrInvalidConfig) || !contains(err.Error(), "auth.token_file") {
		t.Fatalf("reload of an empty token file: %v", err)
	}
	if err := call(old, "gamma"); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
	write(tokens, "gamma\n")

	// A rotated certificate serves new connections; open ones keep theirs.
	rotated := selfSigned(t, certFile, keyFile)
	if err := s.ReloadSecurity(); err != nil {
		t.Fatal(err)
	}
	if err := call(dialWith(t, s.Addr, credentials.NewTLS(rotated)), "gamma"); err != nil {
		t.Fatalf("a new connection trusting the rotated certificate: %v", err)
	}
	wantCode(t, call(dialWith(t, s.Addr, credentials.NewTLS(clientTLS(t, false))), "gamma"), codes.Unavailable)
	if err := call(old, "gamma"); err != nil {
		t.Fatalf("the connection made before the rotation: %v", err)
	}
	write(keyFile, "not a key")
	if err := s.ReloadSecurity(); !errors.Is(err, server.ErrInvalidConfig) || !contains(err.Error(), "tls.cert_file, tls.key_file") {
		t.Fatalf("reload of a bad key: %v", err)
	}
	if err := call(dialWith(t, s.Addr, credentials.NewTLS(rotated)), "gamma"); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
}
