package diskcache

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
	"golang.org/x/sys/unix"
)

// freeSpace returns the bytes an unprivileged user may still write in the
// file system of dir.
func freeSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// readEntryAt reads hdr then dst from the start of f with one preadv
// (several if the kernel returns less), and returns the bytes read.
func readEntryAt(f *os.File, hdr, dst []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	total := len(hdr) + len(dst)
	got := 0
	for got < total {
		var iov [][]byte
		if got < len(hdr) {
			iov = [][]byte{hdr[got:], dst}
		} else {
			iov = [][]byte{dst[got-len(hdr):]}
		}
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Preadv(int(fd), iov, int64(got))
			return !errors.Is(rerr, unix.EAGAIN)
		}); err != nil {
			return got, err
		}
		if rerr != nil {
			return got, rerr
		}
		if n == 0 {
			return got, io.ErrUnexpectedEOF
		}
		got += n
	}
	return got, nil
}

// uncached reports whether most of the first size bytes of f are not in
// the page cache, so that reading them directly beats copying them from
// it. It asks cachestat(2), which only counts. Where cachestat is missing
// (Linux before 6.5) the answer is true: a direct read is right in every
// case, only slower than a copy when the entry was just written.
func uncached(f *os.File, size int64) bool {
	rng := unix.CachestatRange{Off: 0, Len: uint64(index.AlignUp(size))}
	var st unix.Cachestat_t
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno != 0 {
		return true
	}
	return st.Cache*2 < rng.Len/source.DirectAlign
}

// readEntryDirect reads hdr then win, both page-aligned and whole pages,
// from the start of f with O_DIRECT, in one preadv (more only if the
// kernel returns less before the end of the file), and returns the bytes
// read. It leaves f in O_DIRECT mode (f is closed after) but when it
// returns an error wrapping source.ErrNoDirect: f's file system refuses
// direct reads, nothing was read, and f reads through the page cache.
func readEntryDirect(f *os.File, hdr, win []byte) (int, error) {
	fd := int(f.Fd())
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		// Without O_NONBLOCK, which cachedir opens with: a direct read
		// waits for the disk.
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, (fl|unix.O_DIRECT)&^unix.O_NONBLOCK)
	}
	if err != nil {
		return 0, fmt.Errorf("O_DIRECT on %s: %w: %w", f.Name(), err, source.ErrNoDirect)
	}
	total := len(hdr) + len(win)
	got := 0
	for got < total {
		var iov [][]byte
		if got < len(hdr) {
			iov = [][]byte{hdr[got:], win}
		} else {
			iov = [][]byte{win[got-len(hdr):]}
		}
		n, err := unix.Preadv(fd, iov, int64(got))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EINVAL) && got == 0:
			// Back to reads through the page cache, which the caller
			// makes next.
			unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
			return 0, fmt.Errorf("direct read of %s: %w: %w", f.Name(), err, source.ErrNoDirect)
		case err != nil:
			return got, err
		}
		got += n
		if n == 0 || n%source.DirectAlign != 0 {
			break // the end of the file
		}
	}
	return got, nil
}
