package server

import (
	"reflect"
	"strings"
	"testing"
)

func TestSecurityConfigYAML(t *testing.T) {
	const tables = "tables:\n  - {name: t, queue: 5}\n"
	good := []struct {
		yaml string
		tls  TLSConfig
		auth AuthConfig
	}{
		{"", TLSConfig{}, AuthConfig{}},
		{"tls: {cert_file: s.pem, key_file: s.key}\n", TLSConfig{CertFile: "s.pem", KeyFile: "s.key"}, AuthConfig{}},
		{"tls:\n  cert_file: s.pem\n  key_file: s.key\n  client_ca_file: ca.pem\nauth: {token_file: /etc/reverie/tokens}\n",
			TLSConfig{CertFile: "s.pem", KeyFile: "s.key", ClientCAFile: "ca.pem"}, AuthConfig{TokenFile: "/etc/reverie/tokens"}},
	}
	for _, tt := range good {
		cfg, err := parseConfigFile("c.yaml", []byte(tables+tt.yaml))
		if err != nil || cfg.TLS != tt.tls || !reflect.DeepEqual(cfg.Auth, tt.auth) {
			t.Errorf("%q: got %+v, %+v, %v; want %+v, %+v", tt.yaml, cfg.TLS, cfg.Auth, err, tt.tls, tt.auth)
		}
	}
	bad := []struct{ yaml, want string }{
		{"tls: {cert_file: s.pem}\n", "tls: cert_file and key_file are both required (line 3)"},
		{"tls: {client_ca_file: ca.pem}\n", "tls: cert_file and key_file are both required"},
		{"tls: {cert_file: s.pem, key_file: s.key, ca: x}\n", `tls.ca: unknown key "ca"; want one of cert_file, key_file, client_ca_file`},
		{"tls: {cert_file: [a], key_file: s.key}\n", "tls.cert_file: must be a string"},
		{"tls: on\n", "tls: must be a mapping"},
		{"auth: {}\n", "auth: token_file is required"},
		{"auth: {tokens: [a]}\n", `auth.tokens: unknown key "tokens"; want one of token_file`},
		// Empty paths (a template's unset variable) would turn tokens or
		// mutual TLS off without a word.
		{"auth: {token_file: \"\"}\n", "auth.token_file: must not be empty"},
		{"tls: {cert_file: s.pem, key_file: s.key, client_ca_file: \"\"}\n", "tls.client_ca_file: must not be empty"},
		{"tls: {cert_file: \"\", key_file: s.key}\n", "tls.cert_file: must not be empty"},
	}
	for _, tt := range bad {
		_, err := parseConfigFile("c.yaml", []byte(tables+tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}
