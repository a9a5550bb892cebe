package slab

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Slabs live outside the Go heap, in anonymous mappings: the memory the
// budget counts is then exactly the memory the process holds (it returns
// to the system when a slab is unmapped, not when a garbage collection
// gets to it), the garbage collector never scans or zeroes it, and the
// mapping can ask for transparent huge pages, which spare the random
// record gathers of a shuffled buffer most of their TLB misses.

// hugePage is the size of a transparent huge page on x86-64 and arm64
// with 4 KiB pages. Where it is another size, slabs only lose the
// alignment that keeps their huge pages when they grow.
const hugePage = 2 << 20

// Map returns n bytes of zeroed memory. The mapping takes whole pages;
// the budget counts n, which is at most a page short per slab.
func Map(n int64) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(max(n, 1)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocate a slab of %d bytes: %w", n, err)
	}
	b := unsafe.Slice((*byte)(p), max(n, 1))
	// Only advice: without transparent huge pages the slab works the same.
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b, nil
}

// Grow returns slab b made n bytes long, n > cap(b); b must not be used
// after. The kernel moves b's pages rather than copying them, to an address
// at the same offset within a huge page as b's: moved anywhere else, its
// huge pages would be split into small ones, and gathers from the slab
// would run slower until the kernel merged them again.
func Grow(b []byte, n int64) ([]byte, error) {
	old := unsafe.Pointer(unsafe.SliceData(b))
	span := uintptr(n) + hugePage
	res, err := unix.MmapPtr(-1, 0, nil, span, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserve room to grow a slab to %d bytes: %w", n, err)
	}
	head := (uintptr(old)%hugePage + hugePage - uintptr(res)%hugePage) % hugePage
	at := unsafe.Add(res, head)
	p, err := unix.MremapPtr(old, uintptr(cap(b)), at, uintptr(n), unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED)
	if err != nil {
		_ = unix.MunmapPtr(res, span)
		return nil, fmt.Errorf("grow a slab from %d to %d bytes: %w", cap(b), n, err)
	}
	// Give back what is left of the reservation around the slab.
	page := uintptr(unix.Getpagesize())
	used := (uintptr(n) + page - 1) / page * page
	if head > 0 {
		_ = unix.MunmapPtr(res, head)
	}
	if tail := span - head - used; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(at, used), tail)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// Unmap returns a slab's memory to the system. Nothing may use it after.
func Unmap(b []byte) {
	if cap(b) > 0 {
		_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(cap(b)))
	}
}
