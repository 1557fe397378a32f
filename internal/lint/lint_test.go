// Package lint checks rules about the code base that the compiler does not:
// which packages may import which.
package lint

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportRules enforces the layering: internal packages and the public
// selector package hold the replay logic and must not depend on gRPC or on
// the server; the server must not depend on the client, nor the client on
// the server or the table.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/reverie-rl/reverie/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/reverie-rl/reverie/"
	rules := []struct {
		pkgPrefix string
		forbidden []string
	}{
		{mod + "internal/", []string{"google.golang.org/grpc", mod + "server", mod + "client", mod + "cmd"}},
		{mod + "selector", []string{"google.golang.org/grpc", mod + "server", mod + "client", mod + "internal/"}},
		{mod + "server", []string{mod + "client", mod + "cmd"}},
		{mod + "client", []string{mod + "server", mod + "internal/table", mod + "internal/chunkstore", mod + "cmd"}},
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		for _, r := range rules {
			if !strings.HasPrefix(pkg, r.pkgPrefix) || strings.HasPrefix(pkg, mod+"internal/lint") {
				continue
			}
			checked++
			for _, imp := range imports {
				for _, f := range r.forbidden {
					if strings.HasPrefix(imp, f) && !(f == mod+"server" && strings.HasPrefix(pkg, mod+"server")) {
						t.Errorf("%s imports %s, which the layering forbids", pkg, imp)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package matched any rule; is the module path right?")
	}
}
