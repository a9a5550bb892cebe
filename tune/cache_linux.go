package tune

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cachedRange returns how many 4 KiB pages of the n bytes at off of f are
// in the page cache, from cachestat(2) (Linux 6.5 on) or, where it is
// missing or refused, mincore(2) on a mapping of the range.
func cachedRange(f *os.File, off, n int64) (int64, bool) {
	if n <= 0 {
		return 0, true
	}
	from := off &^ (dioAlign - 1)
	rng := unix.CachestatRange{Off: uint64(from), Len: uint64(off + n - from)}
	var st unix.Cachestat_t
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno == 0 {
		return int64(st.Cache), true
	}
	m, err := unix.Mmap(int(f.Fd()), from, int(off+n-from), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, false
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (int64(len(m))+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, false
	}
	var c int64
	for _, v := range vec {
		c += int64(v & 1)
	}
	return c * page / dioAlign, true
}

// coldRange reports whether most of the n bytes at off of f are not in
// the page cache (false when that cannot be told).
func coldRange(f *os.File, off, n int64) bool {
	c, ok := cachedRange(f, off, n)
	return ok && c*dioAlign < n/2
}

// dropRange asks the kernel to drop the n bytes at off of f (n = 0: to
// the end) from the page cache.
func dropRange(f *os.File, off, n int64) {
	unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}
