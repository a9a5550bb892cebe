package blockcache

import "golang.org/x/sys/unix"

// freeSpace returns the bytes an unprivileged user may still write in the
// file system of dir.
func freeSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
