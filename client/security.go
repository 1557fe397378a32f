package client

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithTLS makes the connection speak TLS with cfg (nil: the system's root
// CAs and the address's host name). For mutual TLS, give cfg the client's
// certificate. A server started with --tls-cert needs it; Reverb's server
// speaks only plaintext.
func WithTLS(cfg *tls.Config) Option {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	creds := grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	return func(o *options) {
		o.tls = true
		o.dialOpts = append(o.dialOpts, creds)
	}
}

// WithToken sends "authorization: Bearer token" with every call, as a
// server started with --auth-token-file asks. The token is sent only over
// TLS (WithTLS): over plaintext, calls fail before anything is sent.
func WithToken(token string) Option {
	return WithDialOptions(grpc.WithPerRPCCredentials(bearerToken(token)))
}

type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return true }
