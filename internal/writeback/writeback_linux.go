package writeback

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// writeback starts the writeback of [off, off+n), waits for the window
// before it to be written and drops that one from the page cache. It
// reports supported false, and no error, where the file system does not
// support sync_file_range.
func writeback(f *os.File, off, n int64) (supported bool, err error) {
	fd := int(f.Fd())
	if err := unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return unsupported(err)
	}
	if off < n {
		return true, nil
	}
	prev := off - n
	const wait = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	if err := unix.SyncFileRange(fd, prev, n, wait); err != nil {
		return unsupported(err)
	}
	// Advice only: an error leaves the pages cached, nothing more.
	_ = unix.Fadvise(fd, prev, n, unix.FADV_DONTNEED)
	return true, nil
}

// unsupported sorts sync_file_range's errors: those that say the file
// system cannot do it turn streaming off; the rest (EIO, ENOSPC) are write
// errors.
func unsupported(err error) (bool, error) {
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ESPIPE) {
		return false, nil
	}
	return true, err
}
