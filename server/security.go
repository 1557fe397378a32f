package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TLSConfig makes the server speak TLS. The zero value serves plaintext,
// as Reverb does (and as dm-reverb's client expects). See docs/config.md.
type TLSConfig struct {
	// CertFile and KeyFile are the server's PEM certificate chain and
	// private key; both or neither.
	CertFile string
	KeyFile  string
	// ClientCAFile, if set, asks every client for a certificate signed by
	// one of these PEM CA certificates (mutual TLS) and refuses
	// connections without one. Needs CertFile.
	ClientCAFile string
}

// Enabled reports whether any TLS field is set.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != "" }

func (t TLSConfig) validate() error {
	if !t.Enabled() {
		return nil
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return fmt.Errorf("%w: tls: cert_file and key_file go together (got cert_file %q, key_file %q)", ErrInvalidConfig, t.CertFile, t.KeyFile)
	}
	return nil
}

// load reads the certificate files into a server TLS config.
func (t TLSConfig) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: tls.cert_file, tls.key_file: %v", ErrInvalidConfig, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: tls.client_ca_file: %v", ErrInvalidConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: tls.client_ca_file: %s holds no PEM certificate", ErrInvalidConfig, t.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// AuthConfig makes the server ask every call for a bearer token: the
// metadata "authorization: Bearer TOKEN". The zero value asks for none.
// The health service answers without a token, for load balancers and
// orchestrators. See docs/config.md.
type AuthConfig struct {
	// Tokens accepted.
	Tokens []string
	// TokenFile holds more tokens, one per line; blank lines and lines
	// starting with # are skipped. It is read when the server starts and
	// by ReloadSecurity.
	TokenFile string
}

// Enabled reports whether tokens are asked for.
func (a AuthConfig) Enabled() bool { return len(a.Tokens) > 0 || a.TokenFile != "" }

func (a AuthConfig) validate() error {
	for i, tok := range a.Tokens {
		if err := checkToken(tok); err != nil {
			return fmt.Errorf("%w: auth.tokens[%d]: %v", ErrInvalidConfig, i, err)
		}
	}
	return nil
}

func checkToken(tok string) error {
	if tok == "" {
		return fmt.Errorf("empty token")
	}
	if strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("a token must not hold spaces or control characters")
	}
	return nil
}

// tokenDigests returns the SHA-256 of every token of a, reading TokenFile.
func (a AuthConfig) tokenDigests() ([][sha256.Size]byte, error) {
	toks := append([]string(nil), a.Tokens...)
	if a.TokenFile != "" {
		data, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: auth.token_file: %v", ErrInvalidConfig, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for line := 1; sc.Scan(); line++ {
			tok := strings.TrimSpace(sc.Text())
			if tok == "" || strings.HasPrefix(tok, "#") {
				continue
			}
			if err := checkToken(tok); err != nil {
				return nil, fmt.Errorf("%w: auth.token_file: %s:%d: %v", ErrInvalidConfig, a.TokenFile, line, err)
			}
			toks = append(toks, tok)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%w: auth.token_file: %v", ErrInvalidConfig, err)
		}
		if len(toks) == len(a.Tokens) {
			return nil, fmt.Errorf("%w: auth.token_file: %s holds no token", ErrInvalidConfig, a.TokenFile)
		}
	}
	out := make([][sha256.Size]byte, len(toks))
	for i, tok := range toks {
		out[i] = sha256.Sum256([]byte(tok))
	}
	return out, nil
}

// authenticator checks the bearer token of each call against the
// digests of the tokens accepted, which ReloadSecurity may replace.
type authenticator struct {
	digests atomic.Pointer[[][sha256.Size]byte]
}

const healthPrefix = "/grpc.health.v1.Health/"

func (a *authenticator) check(ctx context.Context, method string) error {
	if strings.HasPrefix(method, healthPrefix) || isLocal(ctx) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return status.Errorf(codes.Unauthenticated, "authorization: missing; this server wants the metadata \"authorization: Bearer TOKEN\"")
	}
	for _, v := range vals {
		scheme, tok, ok := strings.Cut(v, " ")
		if !ok || !strings.EqualFold(scheme, "bearer") {
			continue
		}
		// Digests of equal length, compared in constant time: a token's
		// length and prefix leak nothing.
		d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		match := 0
		for _, want := range *a.digests.Load() {
			match |= subtle.ConstantTimeCompare(d[:], want[:])
		}
		if match == 1 {
			return nil
		}
		return status.Errorf(codes.Unauthenticated, "authorization: the bearer token is not one this server accepts")
	}
	return status.Errorf(codes.Unauthenticated, "authorization: want \"Bearer TOKEN\"")
}

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// security is the server's TLS and token state, which ReloadSecurity
// replaces.
type security struct {
	tls  atomic.Pointer[tls.Config] // nil without TLS
	auth *authenticator             // nil without tokens
}

// secured is what the transport needs of the security state: the
// credentials for each connection's handshake, and the token check.
type secured struct {
	creds  credentials.TransportCredentials
	unary  []grpc.UnaryServerInterceptor
	stream []grpc.StreamServerInterceptor
}

// newSecurity reads cfg's certificates and tokens and returns the state
// and what the transport uses of it.
func newSecurity(cfg *Config) (*security, secured, error) {
	sec := &security{}
	var out secured
	var creds credentials.TransportCredentials
	if cfg.TLS.Enabled() {
		tc, err := cfg.TLS.load()
		if err != nil {
			return nil, out, err
		}
		sec.tls.Store(tc)
		// Each handshake takes the config current at the time, so that a
		// reload reaches new connections; open ones keep theirs.
		base := &tls.Config{
			Certificates: tc.Certificates,
			MinVersion:   tls.VersionTLS12,
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				return sec.tls.Load(), nil
			},
		}
		creds = credentials.NewTLS(base)
	}
	// Connections from the local listener skip the handshake (local.go).
	out.creds = newLocalCreds(creds)
	if cfg.Auth.Enabled() {
		digests, err := cfg.Auth.tokenDigests()
		if err != nil {
			return nil, out, err
		}
		sec.auth = &authenticator{}
		sec.auth.digests.Store(&digests)
		out.unary = append(out.unary, sec.auth.unary)
		out.stream = append(out.stream, sec.auth.stream)
	}
	return sec, out, nil
}

// ReloadSecurity reads the certificate, key, client CA and token files
// again, for calls and connections from now on: rotated certificates and
// tokens take effect without a restart, which would lose what the tables
// hold in memory. Open connections keep the certificate they were made
// with; a call checks its token when it starts. If any file fails to
// load, nothing changes and the error names the field. TLS and tokens
// cannot be turned on or off by a reload. `reverie serve` reloads on
// SIGHUP.
func (s *Server) ReloadSecurity() error {
	var tc *tls.Config
	var digests [][sha256.Size]byte
	var err error
	if s.sec.tls.Load() != nil {
		if tc, err = s.cfg.TLS.load(); err != nil {
			return err
		}
	}
	if s.sec.auth != nil {
		if digests, err = s.cfg.Auth.tokenDigests(); err != nil {
			return err
		}
	}
	if tc != nil {
		s.sec.tls.Store(tc)
	}
	if s.sec.auth != nil {
		s.sec.auth.digests.Store(&digests)
	}
	s.log.Info("security reloaded", "tls", tc != nil, "tokens", len(digests))
	return nil
}
