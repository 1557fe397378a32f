package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// dirLayout names checkpoint directories: UTC, RFC 3339 with all nine
// fractional digits, so that names sort as the times do.
const dirLayout = "2006-01-02T15:04:05.000000000Z"

// DirName is the name of the checkpoint directory for t.
func DirName(t time.Time) string { return t.UTC().Format(dirLayout) }

// ParseDirName returns the time a checkpoint directory name stands for, and
// false if name is not such a name (DirName of some time).
func ParseDirName(name string) (time.Time, bool) {
	t, err := time.Parse(dirLayout, name)
	if err != nil || t.Format(dirLayout) != name {
		return time.Time{}, false
	}
	return t, true
}

// listNames returns the names in root that are checkpoint directory names,
// complete or not, oldest first. A missing root has none.
func listNames(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var names []string
	for _, e := range ents {
		if _, ok := ParseDirName(e.Name()); ok && e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// Complete reports whether dir is a finished checkpoint: it holds DONE and
// the checkpoint file.
func Complete(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, DoneName)); err != nil {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	return err == nil && st.Mode().IsRegular()
}

// Latest returns the newest complete checkpoint directory in root, or ""
// if there is none (or no root). Incomplete directories are ignored.
func Latest(root string) (string, error) {
	names, err := listNames(root)
	if err != nil {
		return "", err
	}
	for _, name := range slices.Backward(names) {
		if dir := filepath.Join(root, name); Complete(dir) {
			return dir, nil
		}
	}
	return "", nil
}

// Prune removes every checkpoint directory in root, complete or not,
// except keep (a directory in root). Other entries of root are left alone.
func Prune(root, keep string) error {
	names, err := listNames(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if name == filepath.Base(keep) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Resolve returns the checkpoint file that path names: a checkpoint
// directory, which must be complete, or a checkpoint file.
func Resolve(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if !st.IsDir() {
		return path, nil
	}
	file := filepath.Join(path, FileName)
	if _, err := os.Stat(file); err != nil {
		if _, tmpErr := os.Stat(file + tmpSuffix); tmpErr == nil {
			return "", fmt.Errorf("checkpoint: %s is incomplete: its file was never finished (%s%s)", path, FileName, tmpSuffix)
		}
		return "", fmt.Errorf("checkpoint: %s is not a checkpoint directory: %w", path, err)
	}
	if _, err := os.Stat(filepath.Join(path, DoneName)); err != nil {
		return "", fmt.Errorf("checkpoint: %s is incomplete: it has no %s file", path, DoneName)
	}
	return file, nil
}

// LockFile names the file in a checkpoint root that a server holds locked
// while it may write checkpoints there.
const LockFile = "LOCK"

// ErrLocked is returned by LockRoot when another server, in this process
// or another, holds the root.
var ErrLocked = errors.New("checkpoint: directory is in use by another server")

// LockRoot creates root if needed and locks it, so that a second server
// pointed at it fails to start: its pruning would delete the first one's
// checkpoints, even one being written, and a restart would restore
// whichever server checkpointed last. Close the result to unlock. A
// server that only restores a checkpoint from a directory (RestorePath)
// does not lock it.
func LockRoot(root string) (io.Closer, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	// Through symbolic links: the process's lock registry goes by name.
	dir, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	lock, err := vfs.Default.Lock(filepath.Join(dir, LockFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrLocked, root, err)
	}
	return lock, nil
}
