package blockcache

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"golang.org/x/sys/unix"
)

// A loader with a disk cache and blocks of index.MinDirectBlock places
// every block in pages of its own, at its offset within a page of its
// file, and the cache reads an entry that is not in the page cache
// straight into them with O_DIRECT (those of half a MinDirectBlock or more;
// a file's shorter last block is read through the page cache): every
// byte of every block is served from there, as the source has it, none
// read from the source.
func TestDiskCacheReadsColdEntriesStraightIntoTheBlocksPages(t *testing.T) {
	root, files := blocktest.Dataset(t, 25, 4, 450, 10000)
	f := &loaderFixture{root, files, build(t, root, index.Options{BlockSize: index.MinDirectBlock})}
	var paged int64
	for _, b := range f.ix.Blocks {
		if b.Len >= index.MinDirectBlock/2 {
			paged += b.Len
		}
	}
	if paged == 0 || paged == f.total() {
		t.Fatalf("%d of %d bytes in paged entries: the test needs paged and compact ones", paged, f.total())
	}
	dir := filepath.Join(t.TempDir(), "dc")
	var log blocktest.LockedBuffer
	l, dc := diskLoader(t, f, dir, &log)
	f.loadAll(t, l, 0)
	n := int64(len(f.ix.Blocks))
	blocktest.Eventually(t, "every block is written", func() bool { return dc.Stats().Written == n })
	dc.Close()
	names, _ := filepath.Glob(filepath.Join(dir, "b*"))
	for _, name := range names {
		fd, err := unix.Open(name, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Fsync(fd); err != nil {
			t.Fatal(err)
		}
		unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		unix.Close(fd)
	}

	l2, _ := diskLoader(t, f, dir, &log)
	all := make([]int32, n)
	for i := range all {
		all[i] = int32(i)
	}
	b, err := l2.Get(t.Context(), Unit{Blocks: all, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(b)
	if why := f.placed(b); why != "" {
		t.Fatal(why)
	}
	for _, e := range b.exts {
		lead := e.off - index.AlignDown(e.off)
		if p := uintptr(unsafe.Pointer(&b.Data[e.at-lead])); p%uintptr(os.Getpagesize()) != 0 {
			t.Fatalf("block %d: its first page starts at %#x, not at a page boundary", e.block, p)
		}
	}
	s := l2.Stats()
	if s.SourceRequests != 0 || s.DiskCache.HitBytes != f.total() || s.DiskCache.DirectBytes != paged || s.DiskCache.Damaged != 0 {
		t.Fatalf("%d source requests, disk cache %+v: want every block's %d bytes from the cache, the %d of paged entries read directly",
			s.SourceRequests, *s.DiskCache, f.total(), paged)
	}
}
