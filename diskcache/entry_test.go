//go:build linux

package diskcache

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/internal/slab"
	"github.com/corgifs/corgifs/source"
	"golang.org/x/sys/unix"
)

// newPagedFixture is a dataset of four files of about 2 MiB indexed in
// blocks of 1 MiB: each file has two blocks with paged entries and a
// shorter last one with a compact entry.
func newPagedFixture(t *testing.T) *diskFixture {
	t.Helper()
	root, files := blocktest.Dataset(t, 25, 4, 450, 10000)
	ix, err := index.Build(t.Context(), blocktest.Dir(t, root, false), index.Options{BlockSize: index.MinDirectBlock})
	if err != nil {
		t.Fatal(err)
	}
	f := &diskFixture{files, ix}
	var paged, compact int
	for id := range ix.Blocks {
		if f.ext(id).Len >= pagedMin {
			paged++
		} else {
			compact++
		}
	}
	if paged == 0 || compact == 0 {
		t.Fatalf("%d paged and %d compact entries: the test needs both", paged, compact)
	}
	return f
}

// pageLead is the offset of e's first byte within its page, in its file
// and in a slab that places blocks in pages.
func pageLead(e Extent) int64 { return e.Off - index.AlignDown(e.Off) }

// fill stores every block of f in c, as the writers do.
func (f *diskFixture) fill(c *Cache) {
	for id, b := range f.ix.Blocks {
		e := f.ext(id)
		key := c.key(e)
		c.store(diskJob{name: nameOf(key), key: key, ext: e, data: f.bytes(b)})
	}
}

func (f *diskFixture) ext(id int) Extent {
	b := f.ix.Blocks[id]
	return Extent{File: b.File, Block: int32(id), Off: b.Offset, Len: b.Len}
}

// pages is a slab in which every block of f has pages of its own at its
// offset within a page, as a loader that reads into pages places it.
type pages struct {
	mem []byte
	at  []int64 // of each block's window
}

func (f *diskFixture) pages(t *testing.T) *pages {
	t.Helper()
	p := &pages{}
	var n int64
	for id := range f.ix.Blocks {
		e := f.ext(id)
		p.at = append(p.at, n)
		n += index.AlignUp(pageLead(e) + e.Len)
	}
	var err error
	if p.mem, err = slab.Map(n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slab.Unmap(p.mem) })
	return p
}

// read reads block id from c into its pages with ReadExtentPages, after
// dropping its entry from the page cache, so that a paged one is read
// directly, or with ReadExtent if buffered; it returns whether c served it
// and the bytes there.
func (p *pages) read(t *testing.T, c *Cache, f *diskFixture, id int, buffered bool) (bool, []byte) {
	t.Helper()
	e := f.ext(id)
	lead := pageLead(e)
	win := p.mem[p.at[id] : p.at[id]+index.AlignUp(lead+e.Len)]
	dst := win[lead : lead+e.Len]
	clear(win)
	if buffered {
		return c.ReadExtent(e, dst), dst
	}
	dropPages(t, filepath.Join(c.path, nameOf(c.key(e)).String()))
	return c.ReadExtentPages(e, win), dst
}

// dropPages writes back and drops the page-cache pages of the file at
// path, if it is there.
func dropPages(t testing.TB, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// olderEntry is the entry of data under key in the first format,
// "corgidc1" (the data right after the key), and the name it had.
func olderEntry(key, data []byte) (string, []byte) {
	b := []byte("corgidc1")
	b = binary.LittleEndian.AppendUint32(b, formats.UpdateChecksum(0, data))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(key)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(data)))
	b = append(append(b, key...), data...)
	h := fnv.New128a()
	h.Write(key)
	return "b" + hex.EncodeToString(h.Sum(nil)), b
}

// TestDiskCacheServesAnEntryOnlyIntactAndOfItsOwnBlockReadDirectlyOrNot
// damages the entries of every block, paged and compact, in one of many
// ways — cut inside its header or its data, a byte added, a byte flipped
// anywhere, replaced by another block's entry, by the block's entry in the
// older format, or by zeros — and reads each, directly into pages and
// through the page cache: an intact entry is served with the block's bytes
// (a paged one not in the page cache read directly), any other is refused,
// counted as damaged and removed, and, offered again as a fetch from the
// source would, is served again.
func TestDiskCacheServesAnEntryOnlyIntactAndOfItsOwnBlockReadDirectlyOrNot(t *testing.T) {
	f := newPagedFixture(t)
	c, err := Open(f.ix, Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := f.pages(t)
	r := rand.New(rand.NewPCG(25, 3))
	damages := []string{"intact", "cut in header", "cut in data", "appended", "flipped byte", "another block's", "older format", "zeros"}
	var damaged, direct int64
	for round, buffered := range []bool{false, true} {
		f.fill(c)
		for id := range f.ix.Blocks {
			e := f.ext(id)
			key := c.key(e)
			path := filepath.Join(c.path, nameOf(key).String())
			old, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			h, lead := layout(len(key), e)
			var b []byte
			kind := damages[(id+round)%len(damages)]
			switch kind {
			case "intact":
				b = old
			case "cut in header":
				b = old[:r.IntN(h+lead)]
			case "cut in data":
				b = old[:h+lead+r.IntN(int(e.Len))]
			case "appended":
				b = append(old, 0)
			case "flipped byte":
				b = bytes.Clone(old)
				b[r.IntN(len(b))] ^= 1 << r.IntN(8)
			case "another block's":
				other := (id + 1 + r.IntN(len(f.ix.Blocks)-1)) % len(f.ix.Blocks)
				if b, err = os.ReadFile(filepath.Join(c.path, nameOf(c.key(f.ext(other))).String())); err != nil {
					t.Fatal(err)
				}
			case "older format":
				_, b = olderEntry(key, f.bytes(f.ix.Blocks[id]))
			case "zeros":
				b = make([]byte, len(old))
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			paged := e.Len >= pagedMin
			want := f.bytes(f.ix.Blocks[id])
			what := fmt.Sprintf("block %d (paged %v), entry %s, buffered %v", id, paged, kind, buffered)
			if kind != "intact" {
				damaged++
				if ok, _ := p.read(t, c, f, id, buffered); ok {
					t.Fatalf("%s: served", what)
				}
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Fatalf("%s: the refused entry is still there (%v)", what, err)
				}
				// Fetched from the source again, it is cached again.
				c.store(diskJob{name: nameOf(key), key: key, ext: e, data: want})
			}
			if ok, got := p.read(t, c, f, id, buffered); !ok || !bytes.Equal(got, want) {
				t.Fatalf("%s: served %v, bytes equal %v; want the block's bytes", what, ok, bytes.Equal(got, want))
			}
			if paged && !buffered {
				direct += e.Len
			}
		}
	}
	s := c.Stats()
	if s.Damaged != damaged || s.Mismatched != 0 || s.DirectBytes != direct || direct == 0 {
		t.Fatalf("stats %+v: want %d damaged, 0 mismatched, %d bytes read directly", s, damaged, direct)
	}
}

// TestDiskCacheNeverReadsEntriesOfTheOlderFormatAndEvictsThemFirst: a
// cache directory filled by an older corgifs (format "corgidc1", under the
// names it gave) is opened: its entries count against the cache's size,
// but no read finds them (they are misses, not damage, and nothing of them
// is served), and entries of this format written in their place evict
// them, all of them, before any entry of this format.
func TestDiskCacheNeverReadsEntriesOfTheOlderFormatAndEvictsThemFirst(t *testing.T) {
	f := newPagedFixture(t)
	dir := filepath.Join(t.TempDir(), "dc")
	c, err := Open(f.ix, Options{Dir: dir, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var olds []string
	var need int64
	for id, b := range f.ix.Blocks {
		key := c.key(f.ext(id))
		name, entry := olderEntry(key, f.bytes(b))
		if err := os.WriteFile(filepath.Join(dir, name), entry, 0o600); err != nil {
			t.Fatal(err)
		}
		olds = append(olds, name)
		need += entrySize(len(key), f.ext(id))
	}
	c.Close()
	// Room for this format's entries of every block, and not one more.
	c, err = Open(f.ix, Options{Dir: dir, MaxBytes: need})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.Stats(); s.Entries != len(olds) {
		t.Fatalf("%d entries taken stock of, want the %d of the older format", s.Entries, len(olds))
	}
	p := f.pages(t)
	for id := range f.ix.Blocks {
		for _, buffered := range []bool{false, true} {
			if ok, _ := p.read(t, c, f, id, buffered); ok {
				t.Fatalf("block %d: served from an entry of the older format", id)
			}
		}
	}
	if s := c.Stats(); s.Hits != 0 || s.Damaged != 0 || s.Misses != int64(2*len(olds)) {
		t.Fatalf("stats %+v: want every read a miss, none damaged", s)
	}
	f.fill(c)
	for _, name := range olds {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("entry %s of the older format still there (%v)", name, err)
		}
	}
	for id := range f.ix.Blocks {
		if ok, got := p.read(t, c, f, id, false); !ok || !bytes.Equal(got, f.bytes(f.ix.Blocks[id])) {
			t.Fatalf("block %d: not served from its entry of this format", id)
		}
	}
	if s := c.Stats(); s.Written != int64(len(olds)) || s.NotAdmitted != 0 {
		t.Fatalf("stats %+v: want every block written", s)
	}
}

// TestDiskCacheReadsThroughThePageCacheOnceADirectReadIsRefused: a direct
// read the kernel refuses (here memory a byte off a page boundary, as a
// file system without O_DIRECT refuses every one) is made again through
// the page cache and served, logged once; later entries are read through
// the page cache without trying.
func TestDiskCacheReadsThroughThePageCacheOnceADirectReadIsRefused(t *testing.T) {
	f := newPagedFixture(t)
	var log blocktest.LockedBuffer
	c, err := Open(f.ix, Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f.fill(c)
	var n int
	for id := range f.ix.Blocks {
		e := f.ext(id)
		if e.Len < pagedMin {
			continue
		}
		n++
		dropPages(t, filepath.Join(c.path, nameOf(c.key(e)).String()))
		lead := pageLead(e)
		mem, err := slab.Map(index.AlignUp(lead+e.Len) + 2*source.DirectAlign)
		if err != nil {
			t.Fatal(err)
		}
		win := mem[1 : 1+index.AlignUp(lead+e.Len)]
		if !c.read(e, win[lead:lead+e.Len], win) || !bytes.Equal(win[lead:lead+e.Len], f.bytes(f.ix.Blocks[id])) {
			t.Fatalf("block %d: not served, or not its bytes", id)
		}
		slab.Unmap(mem)
	}
	s := c.Stats()
	if s.Hits != int64(n) || s.DirectBytes != 0 || s.Damaged != 0 {
		t.Fatalf("stats %+v: want %d hits, none read directly, no damage", s, n)
	}
	if got := strings.Count(log.String(), "refused a direct read"); n < 2 || got != 1 {
		t.Fatalf("%d log lines about refused direct reads after %d entries, want 1:\n%s", got, n, log.String())
	}
}
