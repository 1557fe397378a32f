//go:build unix

package main

import (
	"sync"
	"syscall"
)

var umaskMu sync.Mutex

// withUmask runs f with the process's umask set to mask, so that the
// files f creates (a unix socket) are never, even for an instant, more
// open than mask allows. The umask is the process's: keep f short.
func withUmask(mask int, f func() error) error {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(mask)
	defer syscall.Umask(old)
	return f()
}
