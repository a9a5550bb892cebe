//go:build !linux

package slab

// Elsewhere than Linux, slabs are ordinary Go memory: no mremap to grow
// them in place and no transparent huge pages to ask for. The budget then
// counts memory the garbage collector returns to the system in its own
// time, not at once when a slab is dropped.

// Map returns n bytes of zeroed memory.
func Map(n int64) ([]byte, error) {
	return make([]byte, max(n, 1)), nil
}

// Grow returns slab b made n bytes long, n > cap(b), with b's bytes
// copied; b must not be used after.
func Grow(b []byte, n int64) ([]byte, error) {
	g := make([]byte, n)
	copy(g, b[:cap(b)])
	return g, nil
}

// Unmap drops a slab; the garbage collector frees it. Nothing may use
// it after.
func Unmap([]byte) {}
