package blockcache

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Slabs live outside the Go heap, in anonymous mappings: the memory the
// budget counts is then exactly the memory the process holds (it returns
// to the system when a slab is unmapped, not when a garbage collection
// gets to it), the garbage collector never scans or zeroes it, and the
// mapping can ask for transparent huge pages, which spare the random
// record gathers of a shuffled buffer most of their TLB misses.

// mapSlab returns n bytes of zeroed memory. The mapping takes whole pages;
// the budget counts n, which is at most a page short per slab.
func mapSlab(n int64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(max(n, 1)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocate a slab of %d bytes: %w", n, err)
	}
	// Only advice: without transparent huge pages the slab works the same.
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b, nil
}

// unmapSlab returns a slab's memory to the system. Nothing may use it after.
func unmapSlab(b []byte) {
	if cap(b) > 0 {
		_ = unix.Munmap(b[:cap(b)])
	}
}
