package local

import (
	"io/fs"
	"syscall"
)

// changeTime returns the inode change time of fi, Unix nanoseconds.
func changeTime(fi fs.FileInfo) (int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Ctim.Nano(), true
}
