package tests

import (
	"bytes"
	"encoding/binary"
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
// cache, by mapping f and asking mincore.
func cachedBytes(t *testing.T, f *os.File, size int64) int64 {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v", f.Name(), err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore %s: %v", f.Name(), e)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * page
}

func TestReadingAPartKeepsOnlyItsLastPagesInTheKernelCache(t *testing.T) {
	// 160 MiB in one part, far more than the 16 MiB kept behind the reader
	// plus the 32 MiB step and the kernel's readahead. Written here rather
	// than by gen, which is slow in a race-detector build.
	src := filepath.Join(t.TempDir(), "src")
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	masked := func(b []byte) uint32 {
		c := crc32.Checksum(b, castagnoli)
		return (c>>15 | c<<17) + 0xa282ead8
	}
	for i := range 4 {
		var b []byte
		for j := range 400 {
			p := bytes.Repeat([]byte{byte(j)}, 100<<10)
			copy(p, fmt.Sprintf("file %d record %d", i, j))
			h := binary.LittleEndian.AppendUint64(nil, uint64(len(p)))
			b = append(b, h...)
			b = binary.LittleEndian.AppendUint32(b, masked(h))
			b = append(b, p...)
			b = binary.LittleEndian.AppendUint32(b, masked(p))
		}
		writeFile(t, filepath.Join(src, fmt.Sprintf("data-%d.tfrecord", i)), b)
	}
	m := startMount(t, src, "--seed", "5")
	f, err := os.Open(m.part(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v\n%s", f.Name(), err, m.log)
	}
	size := int64(len(all))
	if size < 150<<20 {
		t.Fatalf("part holds %d bytes, want at least 150 MiB for the test to mean anything", size)
	}
	// The daemon asks the kernel to drop pages from a goroutine: give it
	// a moment.
	const bound = 16<<20 + 32<<20 + 16<<20
	var cached int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if cached = cachedBytes(t, f, size); cached <= bound || time.Now().After(deadline) {
			break
		}
	}
	if cached > bound {
		t.Errorf("after reading all %d MiB of a part, with the file still open, the kernel caches %d MiB of it, want at most %d MiB",
			size>>20, cached>>20, bound>>20)
	}
	// Dropped pages are served again, with the same bytes.
	for _, off := range []int64{0, 7<<20 + 12345, size / 2, size - 5000} {
		got := make([]byte, min(3<<20, size-off))
		if _, err := f.ReadAt(got, off); err != nil && err != io.EOF {
			t.Fatalf("read again at %d: %v", off, err)
		}
		if !bytes.Equal(got, all[off:off+int64(len(got))]) {
			t.Errorf("%d bytes read again at offset %d differ from those of the first read", len(got), off)
		}
	}
}
