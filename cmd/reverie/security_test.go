package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestServeTLSAndTokens: the binary serves TLS and asks for tokens from
// its flags; `reverie info` and `reverie bench` connect with theirs.
func TestServeTLSAndTokens(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	mine := filepath.Join(dir, "mine")
	wrong := filepath.Join(dir, "wrong")
	for f, data := range map[string]string{tokens: "# actors\nalpha\nbeta\n", mine: "beta\n", wrong: "gamma\n"} {
		if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const certs = "../../testdata/tls/"
	p := serve(t, "--tls-cert", certs+"server.pem", "--tls-key", certs+"server.key", "--auth-token-file", tokens)
	if line := logLine(p, "reverie serving"); !strings.Contains(line, "tls=true") || !strings.Contains(line, "auth_tokens=true") {
		t.Errorf("serving log line: %s", line)
	}
	info := func(args ...string) (string, error) {
		out, err := exec.Command(binary, append([]string{"info", "--addr", p.addr, "--timeout", "5s"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := info("--tls-ca", certs+"ca.pem", "--token-file", mine); err != nil || !strings.Contains(out, "replay") {
		t.Fatalf("info with the CA and a token: %v\n%s", err, out)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no token":         {[]string{"--tls-ca", certs + "ca.pem"}, "authorization: missing"},
		"wrong token":      {[]string{"--tls-ca", certs + "ca.pem", "--token-file", wrong}, "not one this server accepts"},
		"untrusted server": {[]string{"--tls", "--token-file", mine}, "certificate"},
		"token, no TLS":    {[]string{"--token-file", mine}, "--token-file needs TLS"},
	} {
		if out, err := info(tc.args...); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %v, want a failure mentioning %q:\n%s", name, err, tc.want, out)
		}
	}
	ins, _ := runBenchJSON(t, p, "--addr", p.addr, "--mode", "insert", "--items", "200", "--tls-ca", certs+"ca.pem", "--token-file", mine)
	if ins.Items != 200 || ins.Errors != 0 {
		t.Fatalf("bench over TLS with a token: %s", ins)
	}

	// SIGHUP reloads the tokens: beta goes, gamma comes.
	if err := os.WriteFile(tokens, []byte("gamma\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if logs, ok := logsContain(p, "security reloaded"); !ok {
		t.Fatalf("no reload logged after SIGHUP:\n%s", logs)
	}
	if out, err := info("--tls-ca", certs+"ca.pem", "--token-file", wrong); err != nil {
		t.Fatalf("info with the new token: %v\n%s", err, out)
	}
	if out, err := info("--tls-ca", certs+"ca.pem", "--token-file", mine); err == nil || !strings.Contains(out, "not one this server accepts") {
		t.Fatalf("info with the dropped token: %v\n%s", err, out)
	}
	p.stop(t, syscall.SIGTERM)
}

// --local-listen serves the same tables on a unix socket, 0660, to
// clients with neither TLS nor a token, while the TCP listener asks for
// both; the socket goes when the server stops.
func TestServeLocalListen(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("alpha\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "local.sock")
	const certs = "../../testdata/tls/"
	p := serve(t, "--tls-cert", certs+"server.pem", "--tls-key", certs+"server.key", "--auth-token-file", tokens,
		"--local-listen", "unix://"+sock)
	if logs, ok := logsContain(p, "serving local clients"); !ok || !strings.Contains(logs, sock) {
		t.Errorf("no local serving log line naming the socket:\n%s", logs)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o660 {
		t.Errorf("socket mode %v, want 0660", perm)
	}
	ins, _ := runBenchJSON(t, p, "--addr", "unix://"+sock, "--mode", "insert", "--items", "200")
	if ins.Items != 200 || ins.Errors != 0 {
		t.Fatalf("bench on the local socket: %s", ins)
	}
	out, err := exec.Command(binary, "info", "--addr", p.addr, "--timeout", "5s").CombinedOutput()
	if err == nil {
		t.Fatalf("info over TCP without TLS or token succeeded:\n%s", out)
	}
	p.stop(t, syscall.SIGTERM)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind after stop: %v", err)
	}
}

// A --local-listen that is not a unix socket, or cannot be bound, stops
// the server at start and says why.
func TestServeLocalListenBad(t *testing.T) {
	for name, tc := range map[string]struct{ addr, want string }{
		"tcp":         {"127.0.0.1:0", "local_listen: want a unix socket"},
		"no such dir": {"unix://" + filepath.Join(t.TempDir(), "missing", "local.sock"), "cannot listen"},
	} {
		out, err := exec.Command(binary, "serve", "--listen", "127.0.0.1:0", "--local-listen", tc.addr).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v, want exit 1 mentioning %q:\n%s", name, err, tc.want, out)
		}
	}
}
