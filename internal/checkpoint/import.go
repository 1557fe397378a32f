package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrExists is returned by Import when root already holds a complete
// checkpoint of that name.
var ErrExists = errors.New("checkpoint: already exists")

// Import makes root/name a complete checkpoint holding the file read from
// src, for example a copy kept elsewhere. It streams src into
// checkpoint.rvck.tmp, fsyncs it, verifies it (see Verify), and only then
// renames it and writes DONE, as Commit does; so an interrupted or damaged
// copy is never taken for a checkpoint. An incomplete directory of that
// name is replaced; a complete one is left alone and Import fails with
// ErrExists. On error the directory is removed, and an error from Verify
// is returned as is (it wraps ErrCorrupt for a damaged file).
func Import(root, name string, src io.Reader) (_ string, sum *Summary, err error) {
	if _, ok := ParseDirName(name); !ok {
		return "", nil, fmt.Errorf("checkpoint: %q is not a checkpoint directory name", name)
	}
	target := filepath.Join(root, name)
	if Complete(target) {
		return "", nil, fmt.Errorf("%w: %s", ErrExists, target)
	}
	if err := os.RemoveAll(target); err != nil {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(target)
		}
	}()
	tmp := filepath.Join(target, FileName+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("checkpoint: copy into %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("checkpoint: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return "", nil, fmt.Errorf("checkpoint: close %s: %w", tmp, err)
	}
	if sum, err = Verify(tmp); err != nil {
		return "", nil, err
	}
	file := filepath.Join(target, FileName)
	if err := os.Rename(tmp, file); err != nil {
		return "", nil, fmt.Errorf("checkpoint: %w", err)
	}
	sum.Path = file
	if err := syncDir(target); err != nil {
		return "", nil, err
	}
	if err := writeDone(target); err != nil {
		return "", nil, err
	}
	if err := syncDir(root); err != nil {
		return "", nil, err
	}
	return target, sum, nil
}
