//go:build unix

package main

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLocalSocketIsCreatedClosed: the local socket is created with no
// permission for others, even under a umask of 0, rather than chmod'ed
// after it exists; and the process's umask is back as it was after.
func TestLocalSocketIsCreatedClosed(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	sock := filepath.Join(t.TempDir(), "s.sock")
	var l net.Listener
	if err := withUmask(0o117, func() (err error) {
		l, err = net.Listen("unix", sock)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o117 != 0 {
		t.Errorf("socket created with mode %v, open to others", perm)
	}
	if now := syscall.Umask(0); now != 0 {
		t.Errorf("umask %o after withUmask, want 0 back", now)
	}
}
