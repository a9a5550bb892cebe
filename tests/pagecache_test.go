package tests

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cachedBytes returns how many bytes of f the kernel holds in its page
// cache, by mapping f and asking mincore. Mapping a file opened with direct
// I/O (as parts are) first drops its cached pages: for a part mapped by the
// reader, ask residentBytes of the reader's own mapping instead.
func cachedBytes(t *testing.T, f *os.File, size int64) int64 {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v", f.Name(), err)
	}
	defer unix.Munmap(m)
	return residentBytes(t, m)
}

// residentBytes returns how many bytes of the mapping m are in the page
// cache, by asking mincore.
func residentBytes(t *testing.T, m []byte) int64 {
	t.Helper()
	page := int64(os.Getpagesize())
	vec := make([]byte, (int64(len(m))+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * page
}

// writePageCacheSource writes 160 MiB of 100 KiB TFRecord records in 4
// files: in one part, far more than the 16 MiB kept behind the reader plus
// the 32 MiB step and the kernel's readahead. Written here rather than by
// gen, which is slow in a race-detector build, and streamed: the test
// process must stay small, as the peak resident size of the commands later
// tests start counts the parent's memory they share until exec.
func writePageCacheSource(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	masked := func(b []byte) uint32 {
		c := crc32.Checksum(b, castagnoli)
		return (c>>15 | c<<17) + 0xa282ead8
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 100<<10)
	for i := range 4 {
		f, err := os.Create(filepath.Join(src, fmt.Sprintf("data-%d.tfrecord", i)))
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		for j := range 400 {
			for k := range payload {
				payload[k] = byte(j)
			}
			copy(payload, fmt.Sprintf("file %d record %d", i, j))
			h := binary.LittleEndian.AppendUint64(nil, uint64(len(payload)))
			w.Write(binary.LittleEndian.AppendUint32(h, masked(h)))
			w.Write(payload)
			w.Write(binary.LittleEndian.AppendUint32(nil, masked(payload)))
		}
		if err := errors.Join(w.Flush(), f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// pageCacheBound is the most of a part that may stay in the kernel's page
// cache once it has been read to its end: the 16 MiB kept behind the
// reader, the 32 MiB step of the drop-behind and 16 MiB of readahead.
const pageCacheBound = 16<<20 + 32<<20 + 16<<20

// waitCached returns what cached says once it is at most pageCacheBound,
// or after 10 s: the daemon asks the kernel to drop pages from a
// goroutine.
func waitCached(cached func() int64) int64 {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n := cached(); n <= pageCacheBound || time.Now().After(deadline) {
			return n
		}
	}
}

func TestReadingAPartKeepsOnlyItsLastPagesInTheKernelCache(t *testing.T) {
	src := writePageCacheSource(t)
	m := startMount(t, src, "--seed", "5")
	// A part is read with direct I/O, which the page cache never sees,
	// while fewer than 16 are open (fs.maxDirect); past that, through the
	// page cache. Hold 16 parts of other epochs open so that this one is.
	for e := 1; e <= 16; e++ {
		g, err := os.Open(m.part(e, 0, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
	}
	f, size := openPart(t, m.part(0, 0, 1))
	if size < 150<<20 {
		t.Fatalf("part holds %d bytes, want at least 150 MiB for the test to mean anything", size)
	}
	// Ranges the reader has long passed when it reaches the end, kept
	// from the sequential read to compare with a second read.
	type span struct {
		off  int64
		data []byte
	}
	var spans []span
	for _, off := range []int64{0, 7<<20 + 12345, size / 2, size - 5000} {
		spans = append(spans, span{off, make([]byte, min(3<<20, size-off))})
	}
	buf := make([]byte, 1<<20)
	var pos int64
	for {
		n, err := f.Read(buf)
		for _, s := range spans {
			if lo, hi := max(s.off, pos), min(s.off+int64(len(s.data)), pos+int64(n)); lo < hi {
				copy(s.data[lo-s.off:hi-s.off], buf[lo-pos:hi-pos])
			}
		}
		pos += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s at %d: %v\n%s", f.Name(), pos, err, m.log)
		}
	}
	if pos != size {
		t.Fatalf("read %d bytes of a %d-byte part", pos, size)
	}
	if cached := cachedBytes(t, f, size); cached == 0 {
		t.Errorf("after reading all %d MiB of the 17th part open, the kernel caches none of it: read with direct I/O, not through the page cache", size>>20)
	}
	if cached := waitCached(func() int64 { return cachedBytes(t, f, size) }); cached > pageCacheBound {
		t.Errorf("after reading all %d MiB of a part, with the file still open, the kernel caches %d MiB of it, want at most %d MiB",
			size>>20, cached>>20, pageCacheBound>>20)
	}
	// Dropped pages are served again, with the same bytes.
	for _, s := range spans {
		got := make([]byte, len(s.data))
		if _, err := f.ReadAt(got, s.off); err != nil && err != io.EOF {
			t.Fatalf("read again at %d: %v", s.off, err)
		}
		if !bytes.Equal(got, s.data) {
			t.Errorf("%d bytes read again at offset %d differ from those of the first read", len(got), s.off)
		}
	}
}

// A part is opened with direct I/O, yet a reader may map it: the kernel
// then reads it through its page cache, and the daemon drops the pages the
// reader has passed as it does for a cached part.
func TestMappingAPartServesItsBytesAndKeepsOnlyItsLastPagesInTheKernelCache(t *testing.T) {
	src := writePageCacheSource(t)
	m := startMount(t, src, "--seed", "5")
	f, size := openPart(t, m.part(0, 0, 1))
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v\n%s", f.Name(), err, m.log)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_SEQUENTIAL); err != nil {
		t.Fatal(err)
	}
	// The mapping against read(2) (direct I/O) of a second open of the
	// part, 1 MiB at a time, compared as it goes so that the test holds no
	// copy of the part.
	g, err := os.Open(m.part(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n, err := g.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			t.Fatalf("read %s at %d: %v\n%s", g.Name(), off, err, m.log)
		}
		if n != int(min(int64(len(buf)), size-off)) {
			t.Fatalf("read %d bytes at %d of a %d-byte part", n, off, size)
		}
		if !bytes.Equal(mem[off:off+int64(n)], buf[:n]) {
			t.Fatalf("the mapped bytes at offset %d differ from those read(2) returns", off)
		}
	}
	if cached := waitCached(func() int64 { return residentBytes(t, mem) }); cached > pageCacheBound {
		t.Errorf("after mapping and touching all %d MiB of a part, the kernel caches %d MiB of it, want at most %d MiB",
			size>>20, cached>>20, pageCacheBound>>20)
	}
}

// openPart opens a part for the rest of the test and returns it with its
// size.
func openPart(t *testing.T, path string) (*os.File, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return f, fi.Size()
}
