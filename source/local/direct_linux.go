package local

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corgifs/corgifs/source"
)

// openDirect opens the file behind f a second time with O_DIRECT. The
// reopening goes through /proc/self/fd, so it reaches the very inode that
// was opened and checked, never a path that may have changed since.
func openDirect(f *os.File) (*os.File, error) {
	dio, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s for direct reads: %w: %w", f.Name(), err, source.ErrNoDirect)
	}
	return dio, nil
}

// uncached reports whether most of the n bytes at off of f are not in the
// page cache, so that reading them directly beats copying them from it. It
// asks cachestat(2), which only counts; a read would start the very
// readahead a direct read is meant to avoid (a RWF_NOWAIT read starts it
// too). Where cachestat is missing (Linux before 6.5) or refused (it wants
// a file the caller owns or may write), the answer is false: a read through
// the page cache is right in every case, only slower when cold.
func uncached(f *os.File, off, n int64) bool {
	from := alignDown(off)
	rng := unix.CachestatRange{Off: uint64(from), Len: uint64(alignUp(off+n) - from)}
	var st unix.Cachestat_t
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno != 0 {
		return false
	}
	return st.Cache*2 < rng.Len/source.DirectAlign
}

// readDirect fills win, which must start at an aligned address, with the
// file's bytes from the aligned offset off, up to the end of the file. It
// returns the number of bytes read.
func readDirect(f *os.File, win []byte, off int64) (int, error) {
	if off%source.DirectAlign != 0 || len(win)%source.DirectAlign != 0 {
		return 0, fmt.Errorf("direct read of %d bytes at %d: %w", len(win), off, source.ErrNoDirect)
	}
	done := 0
	for done < len(win) {
		// Not f.ReadAt: after a short read at the end of the file it would
		// read again at an unaligned offset, which O_DIRECT refuses.
		n, err := unix.Pread(int(f.Fd()), win[done:], off+int64(done))
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EINVAL):
			return done, source.ErrNoDirect
		case err != nil:
			return done, &os.PathError{Op: "read", Path: f.Name(), Err: err}
		}
		done += n
		if n == 0 || n%source.DirectAlign != 0 {
			break // the end of the file
		}
	}
	return done, nil
}

func alignDown(n int64) int64 { return n &^ (source.DirectAlign - 1) }
func alignUp(n int64) int64   { return (n + source.DirectAlign - 1) &^ (source.DirectAlign - 1) }
