package connflags

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parse(t *testing.T, args ...string) (int, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var f Flags
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Parse(%q): %v", args, err)
	}
	opts, err := f.Options()
	return len(opts), err
}

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := filepath.Join("..", "..", "testdata", "tls", "ca.pem")
	cert := filepath.Join("..", "..", "testdata", "tls", "client.pem")
	key := filepath.Join("..", "..", "testdata", "tls", "client.key")
	token := write("token", "s3cret\nignored\n")
	empty := write("empty", "\n")
	notPEM := write("not.pem", "hello")

	ok := map[string]struct {
		args []string
		want int
	}{
		"nothing":      {nil, 0},
		"system roots": {[]string{"--tls"}, 1},
		"ca":           {[]string{"--tls-ca", ca}, 1},
		"mutual":       {[]string{"--tls-ca", ca, "--tls-cert", cert, "--tls-key", key}, 1},
		"token":        {[]string{"--tls-ca", ca, "--token-file", token}, 2},
	}
	for name, tc := range ok {
		if n, err := parse(t, tc.args...); err != nil || n != tc.want {
			t.Errorf("%s: %d options, %v; want %d, nil", name, n, err, tc.want)
		}
	}

	bad := map[string]struct {
		args []string
		want string // in the error
	}{
		"missing ca":      {[]string{"--tls-ca", filepath.Join(dir, "none.pem")}, "--tls-ca"},
		"ca not PEM":      {[]string{"--tls-ca", notPEM}, "holds no PEM certificate"},
		"cert, no key":    {[]string{"--tls-cert", cert}, "--tls-cert and --tls-key go together"},
		"key, no cert":    {[]string{"--tls-key", key}, "--tls-cert and --tls-key go together"},
		"token, no TLS":   {[]string{"--token-file", token}, "needs TLS"},
		"empty token":     {[]string{"--tls", "--token-file", empty}, "holds no token"},
		"missing token":   {[]string{"--tls", "--token-file", filepath.Join(dir, "none")}, "--token-file"},
		"cert is not key": {[]string{"--tls-cert", cert, "--tls-key", cert}, "--tls-cert, --tls-key"},
	}
	for name, tc := range bad {
		if _, err := parse(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}
