package writeback

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentBytes is how much of the file at path is in the page cache.
func residentBytes(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n += int64(page)
		}
	}
	return n
}

// diskDir is a directory on a disk-backed file system: a test temp dir,
// unless that is tmpfs, whose pages are the file and cannot be dropped.
func diskDir(t *testing.T) string {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		return dir
	}
	dir, err := os.MkdirTemp(".", ".writeback-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestFileDropsWrittenWindows: a file written through File
// keeps at most the last windows in the page cache, where a plain write
// of the same bytes keeps them all; and its content is what was written.
func TestFileDropsWrittenWindows(t *testing.T) {
	const size = 12 * Window
	dir := diskDir(t)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*131 + i>>13)
	}
	write := func(name string, stream bool) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var w interface{ Write([]byte) (int, error) } = f
		sf := New(f)
		if stream {
			w = sf
		}
		for p := data; len(p) > 0; p = p[min(len(p), 1<<20):] {
			if _, err := w.Write(p[:min(len(p), 1<<20)]); err != nil {
				t.Fatal(err)
			}
		}
		if stream && sf.Plain() {
			t.Fatalf("sync_file_range is unsupported in %s", dir)
		}
		return path
	}
	plain := write("plain", false)
	streamed := write("streamed", true)
	got, err := os.ReadFile(streamed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("streamed file differs from what was written")
	}
	// Reading it back cached it again: write it once more to measure.
	streamed = write("streamed2", true)
	p, s := residentBytes(t, plain), residentBytes(t, streamed)
	t.Logf("in the page cache: plain write %d MiB, streamed %d MiB of %d MiB", p>>20, s>>20, size>>20)
	if s > 3*Window {
		t.Errorf("streamed file: %d bytes cached, want at most %d", s, 3*Window)
	}
	if p < size/2 {
		t.Logf("the plain write was not kept cached either (%d bytes): the comparison shows nothing here", p)
	}
}

// TestFileUnsupported: where sync_file_range is refused (a pipe
// here), File falls back to plain writes without an error.
func TestFileUnsupported(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan int64)
	go func() {
		var n int64
		buf := make([]byte, 1<<20)
		for {
			k, err := r.Read(buf)
			n += int64(k)
			if err != nil {
				done <- n
				return
			}
		}
	}()
	sf := New(w)
	chunk := make([]byte, 1<<20)
	for range 2 * Window >> 20 {
		if _, err := sf.Write(chunk); err != nil {
			t.Fatalf("write to a pipe: %v", err)
		}
	}
	w.Close()
	if n := <-done; n != 2*Window {
		t.Fatalf("read %d bytes, want %d", n, 2*Window)
	}
	if !sf.Plain() {
		t.Fatal("sync_file_range on a pipe did not turn streaming off")
	}
}
