// Package writeback writes files that are read only after a restart as
// streams the page cache does not keep.
package writeback

import (
	"fmt"
	"os"
)

// Window is how much of a file may sit in the page cache at once: see
// File.
const Window = 8 << 20

// File writes a file as a stream that the page cache does not keep: a
// checkpoint, or a segment of the write-ahead log, which nobody reads
// until a restore. After each Window bytes it starts the kernel's
// writeback of that window, waits for the window before it to reach the
// disk, and drops that window from the page cache. The file then holds at
// most two windows of dirty or cached pages instead of all it wrote: the
// kernel recycles the same pages rather than taking fresh ones for every
// window, which halved its CPU cost of the writes on the machine
// measured (docs/formats.md), and an fsync finds almost nothing left to
// write. Where the system has no such calls (non-Linux), or the file
// system refuses them, it is a plain file. The calls are advice about the
// cache: durability still comes from the caller's fsync.
type File struct {
	f       *os.File
	off     int64 // bytes written
	started int64 // writeback started for [0, started)
	plain   bool  // the calls are unsupported here: plain writes
}

// New returns a File that writes to f, whose offset must be 0.
func New(f *os.File) *File { return &File{f: f} }

// Plain reports whether the file turned out not to support streaming, so
// that it is written plainly.
func (s *File) Plain() bool { return s.plain }

// Write writes p to the file, then starts and finishes the writeback of
// the windows it completed. An error of the writeback (EIO, ENOSPC) is
// returned as a write error.
func (s *File) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	s.off += int64(n)
	if err != nil || s.plain {
		return n, err
	}
	for s.off-s.started >= Window {
		start := s.started
		s.started += Window
		supported, err := writeback(s.f, start, Window)
		if err != nil {
			return n, fmt.Errorf("writeback of %s, bytes %d-%d: %w", s.f.Name(), start, start+Window, err)
		}
		if !supported {
			s.plain = true
			break
		}
	}
	return n, err
}
