// Package slab allocates the large buffers that corgifs loads blocks into
// (the loader's slabs, the index scan's reads, the disk cache's copies
// waiting to be written), outside the Go heap where the system allows it.
package slab
