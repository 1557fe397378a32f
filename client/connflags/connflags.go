// Package connflags holds the command-line flags of programs that connect
// to a server with reverie's client (reverie info, reverie bench,
// bench/churn): TLS and a bearer token, turned into client options.
// docs/config.md ("tls" and "auth") describes both.
package connflags

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/reverie-rl/reverie/client"
)

// Flags are the connection flags, once registered with Register and
// parsed.
type Flags struct {
	tls       bool
	tlsCA     string
	tlsCert   string
	tlsKey    string
	tokenFile string
}

// Register adds --tls, --tls-ca, --tls-cert, --tls-key and --token-file to
// fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&f.tls, "tls", false, "connect with TLS, trusting the system's root CAs (implied by the other --tls flags)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "connect with TLS, trusting the CA certificates in this PEM file")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "client certificate for mutual TLS, PEM (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	fs.StringVar(&f.tokenFile, "token-file", "", "send the bearer token on this file's first line with every call (needs TLS)")
}

// Options returns the client options the parsed flags ask for: none
// without TLS; an error names the flag that is wrong.
func (f *Flags) Options() ([]client.Option, error) {
	var opts []client.Option
	if f.tls || f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" {
		cfg := &tls.Config{}
		if f.tlsCA != "" {
			pem, err := os.ReadFile(f.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %v", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca: %s holds no PEM certificate", f.tlsCA)
			}
		}
		if (f.tlsCert == "") != (f.tlsKey == "") {
			return nil, errors.New("--tls-cert and --tls-key go together")
		}
		if f.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert, --tls-key: %v", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	if f.tokenFile != "" {
		data, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %v", err)
		}
		tok, _, _ := strings.Cut(string(data), "\n")
		if tok = strings.TrimSpace(tok); tok == "" {
			return nil, fmt.Errorf("--token-file: %s: the first line holds no token", f.tokenFile)
		}
		if len(opts) == 0 {
			return nil, errors.New("--token-file needs TLS (--tls or --tls-ca): a token is never sent in plaintext")
		}
		opts = append(opts, client.WithToken(tok))
	}
	return opts, nil
}
