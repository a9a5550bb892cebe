package diskcache

import (
	"errors"
	"io"
	"os"

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
