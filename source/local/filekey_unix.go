//go:build unix

package local

import (
	"io/fs"
	"syscall"
)

// fileKey returns the device and inode of fi, which name one file
// whatever path reached it.
func fileKey(fi fs.FileInfo) ([2]uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, false
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)}, true
}
