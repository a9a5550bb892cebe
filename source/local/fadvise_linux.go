package local

import (
	"os"

	"golang.org/x/sys/unix"
)

// willNeed asks the kernel to read n bytes of f at off into the page cache
// ahead of the inflater, which reads them a small piece at a time: one
// large read from the disk rather than many waits on its latency.
func willNeed(f *os.File, off, n int64) {
	unix.Fadvise(int(f.Fd()), off, n, unix.FADV_WILLNEED)
}
