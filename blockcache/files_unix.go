//go:build unix

package blockcache

import "golang.org/x/sys/unix"

// poolSize returns the descriptors the pool may hold: a quarter of the
// open-file limit, leaving the rest to the FUSE connection, the Go
// runtime, indexing and whatever else the process opens.
func poolSize() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return maxPoolFiles
	}
	return int(min(max(lim.Cur/4, 8), maxPoolFiles))
}
