package checkpoint

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestImport(t *testing.T) {
	src, _ := writeFixture(t, t.TempDir())
	data, err := os.ReadFile(filepath.Join(src, FileName))
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(src)
	root := t.TempDir()

	// A leftover incomplete directory of the same name is replaced.
	if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, name, FileName+tmpSuffix), []byte("junk"), 0o644)

	dir, sum, err := Import(root, name, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(root, name) || !Complete(dir) {
		t.Fatalf("Import = %q, complete %v", dir, Complete(dir))
	}
	if sum.Items != 3 || sum.Path != filepath.Join(dir, FileName) {
		t.Fatalf("summary: %+v", sum)
	}
	if got, _ := Latest(root); got != dir {
		t.Fatalf("Latest = %q, want %q", got, dir)
	}
	if _, _, err := Import(root, name, bytes.NewReader(data)); !errors.Is(err, ErrExists) {
		t.Fatalf("second Import: %v, want ErrExists", err)
	}

	tests := []struct {
		name string
		src  io.Reader
		want error // nil: any error
	}{
		{"truncated", bytes.NewReader(data[:len(data)-3]), ErrCorrupt},
		{"flipped byte", bytes.NewReader(append(append([]byte{}, data[:40]...), append([]byte{data[40] ^ 1}, data[41:]...)...)), ErrCorrupt},
		{"read error", io.MultiReader(bytes.NewReader(data[:20]), errReader{}), errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			_, _, err := Import(root, name, tt.src)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Import: %v, want %v", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(root, name)); !os.IsNotExist(err) {
				t.Fatalf("the directory of a failed import is still there: %v", err)
			}
		})
	}
	if _, _, err := Import(root, "not-a-name", bytes.NewReader(data)); err == nil {
		t.Fatal("Import accepted a bad directory name")
	}
}

var errBoom = errors.New("boom")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBoom }
