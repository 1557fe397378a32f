package checkpoint

import (
	"fmt"
	"os"
)

// writebackWindow is how much of a checkpoint file may sit in the page
// cache at once: see streamFile.
const writebackWindow = 8 << 20

// streamFile writes a checkpoint file as a stream that the page cache does
// not keep. After each writebackWindow bytes it starts the kernel's
// writeback of that window, waits for the window before it to reach the
// disk, and drops that window from the page cache. A checkpoint then holds
// at most two windows of dirty or cached pages instead of the whole file:
// the kernel recycles the same pages rather than filling gigabytes of the
// cache with a file nobody reads until a restore, Commit's fsync finds
// almost nothing left to write, and the kernel's CPU cost of writing the
// file halves (measured: see docs/formats.md). Where the system has no
// such calls (non-Linux), or the file system refuses them, it is a plain
// file; the calls are advice, and durability still comes from Commit's
// fsync.
type streamFile struct {
	f       *os.File
	off     int64 // bytes written
	started int64 // writeback started for [0, started)
	plain   bool  // the calls are unsupported here: plain writes
}

func (s *streamFile) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	s.off += int64(n)
	if err != nil || s.plain {
		return n, err
	}
	for s.off-s.started >= writebackWindow {
		start := s.started
		s.started += writebackWindow
		supported, err := writeback(s.f, start, writebackWindow)
		if err != nil {
			return n, fmt.Errorf("writeback of bytes %d-%d: %w", start, start+writebackWindow, err)
		}
		if !supported {
			s.plain = true
			break
		}
	}
	return n, err
}
