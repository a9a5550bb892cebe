package blockcache

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/internal/slab"
	"github.com/corgifs/corgifs/source"
)

// directFixture is a dataset with blocks large enough to be read with
// O_DIRECT, of records of odd sizes, so that blocks start anywhere in a page.
type directFixture struct {
	files []*blocktest.SrcFile
	ix    *index.Index
}

func newDirectFixture(t *testing.T) *directFixture {
	t.Helper()
	root, files := blocktest.Dataset(t, 7, 3, 1500, 3000)
	ix := build(t, root, index.Options{BlockSize: index.MinDirectBlock})
	if len(ix.Blocks) < 4 {
		t.Fatalf("%d blocks: the fixture is too small", len(ix.Blocks))
	}
	probe, err := ix.Source().Open(ix.Files[0].Path, ix.Files[0].Version)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	_, err = probe.(source.DirectReader).ReadDirect(mustSlab(t, source.DirectAlign), 0)
	if err != nil {
		t.Skipf("the file system of %s does not take direct reads: %v", files[0].Path, err)
	}
	return &directFixture{files, ix}
}

func mustSlab(t *testing.T, n int64) []byte {
	t.Helper()
	b, err := slab.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slab.Unmap(b) })
	return b
}

// evict drops the source files from the page cache but for the first
// cache bytes of each.
func (f *directFixture) evict(t *testing.T, cache int) {
	t.Helper()
	for _, sf := range f.files {
		h, err := os.Open(sf.Path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.ReadAt(make([]byte, len(sf.Data)), 0); err != nil {
			t.Fatal(err)
		}
		// Dirty pages stay cached: written back first, they can go.
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(int(h.Fd()), int64(min(cache, len(sf.Data))), 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
}

// all is the unit of every block, in an order that is not the files'.
func (f *directFixture) all() Unit {
	var u Unit
	for i := len(f.ix.Blocks) - 1; i >= 0; i -= 2 {
		u.Blocks = append(u.Blocks, int32(i))
	}
	for i := len(f.ix.Blocks) - 2; i >= 0; i -= 2 {
		u.Blocks = append(u.Blocks, int32(i))
	}
	return u
}

// check fails the test unless every record of b is the source's, where
// Starts, RecordLen and Locate say it is.
func (f *directFixture) check(t *testing.T, b *Buf, u Unit) {
	t.Helper()
	k := 0
	for _, id := range u.Blocks {
		blk := f.ix.Blocks[id]
		src := f.files[blk.File]
		for i := src.RecordAt(blk.Offset); i < len(src.Starts) && src.Starts[i] < blk.Offset+blk.Len; i++ {
			if k >= len(b.Starts) {
				t.Fatalf("%d records loaded, the unit has more", len(b.Starts))
			}
			at, n := b.Starts[k], b.RecordLen(k)
			want := src.Data[src.Starts[i] : src.Starts[i]+src.FrameLen(i)]
			if !bytes.Equal(b.Data[at:at+n], want) {
				t.Fatalf("record %d (block %d, %s at %d) differs from the source", k, id, src.Rel, src.Starts[i])
			}
			if file, off := b.Locate(at); file != blk.File || off != src.Starts[i] {
				t.Fatalf("Locate(%d) = file %d offset %d, want file %d offset %d", at, file, off, blk.File, src.Starts[i])
			}
			k++
		}
	}
	if k != len(b.Starts) {
		t.Fatalf("%d records loaded, the unit has %d", len(b.Starts), k)
	}
}

func TestLoaderReadsUncachedBlocksDirectlyAndCachedOnesFromTheCache(t *testing.T) {
	f := newDirectFixture(t)
	var total int64
	for _, sf := range f.files {
		total += int64(len(sf.Data))
	}
	for _, tc := range []struct {
		name     string
		cached   int  // bytes of each file in the page cache before the load
		buffered bool // LoaderOptions.Buffered
		direct   func(direct, read int64) bool
		want     string
	}{
		{"cold", 0, false, func(d, r int64) bool { return d >= r }, "every byte read directly"},
		{"warm", 1 << 30, false, func(d, r int64) bool { return d == 0 }, "nothing read directly"},
		{"half cached", 2 << 20, false, func(d, r int64) bool { return d > 0 && d < r }, "the blocks that are not cached, not all"},
		{"cold, buffered", 0, true, func(d, r int64) bool { return d == 0 }, "nothing read directly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.evict(t, tc.cached)
			l := NewLoader(f.ix, LoaderOptions{MaxMemory: 64 << 20, Buffered: tc.buffered})
			u := f.all()
			b, err := l.Get(t.Context(), u)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(b)
			f.check(t, b, u)
			s := l.Stats()
			if s.BytesRead != total {
				t.Errorf("bytes read %d, want the dataset's %d", s.BytesRead, total)
			}
			if !tc.direct(s.DirectBytesRead, s.BytesRead) {
				t.Errorf("%d of %d bytes read directly, want %s", s.DirectBytesRead, s.BytesRead, tc.want)
			}
		})
	}
}

func TestDirectSlabsKeepBlocksOnPagesOfTheirOwn(t *testing.T) {
	f := newDirectFixture(t)
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 64 << 20})
	u := f.all()
	exts, size := l.extents(u, nil)
	if size != l.size(u) {
		t.Fatalf("extents need %d bytes, size says %d", size, l.size(u))
	}
	var end int64
	for i, e := range exts {
		if e.at%source.DirectAlign != e.off%source.DirectAlign {
			t.Errorf("extent %d starts at %d in the slab and %d in its file: not at the same place in a page", i, e.at, e.off)
		}
		if first := index.AlignDown(e.at); first < end {
			t.Errorf("extent %d's first page at %d overlaps the previous extent's pages, which end at %d", i, first, end)
		}
		end = index.AlignUp(e.at + e.n)
	}
	if end != size {
		t.Errorf("pages end at %d, the slab has %d bytes", end, size)
	}
	if waste := size - f.ix.Bytes; waste > int64(len(exts))*2*source.DirectAlign {
		t.Errorf("%d bytes of padding for %d blocks, more than two pages each", waste, len(exts))
	}
}
