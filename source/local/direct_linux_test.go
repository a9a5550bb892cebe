package local

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corgifs/corgifs/source"
)

func TestReadDirectRefusesUnalignedRanges(t *testing.T) {
	const align = source.DirectAlign
	root := t.TempDir()
	data := make([]byte, 3*align+1234)
	for i := range data {
		data[i] = byte(rand.N(256))
	}
	writeFile(t, root, "f", data)
	s := New(root, false, nil)
	sf, err := s.Open("f", listed(t, s, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	f := sf.(*File)
	// Page-aligned memory, as the loader's slabs are.
	slab, err := unix.Mmap(-1, 0, 4*align, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(slab)
	if _, err := f.ReadDirect(slab[:align], 0); err != nil {
		t.Skipf("the file system of %s does not take direct reads: %v", root, err)
	}
	for _, tc := range []struct {
		name string
		win  []byte
		off  int64
	}{
		{"unaligned offset", slab[:align], 100},
		{"unaligned length", slab[:align+1], 0},
	} {
		if _, err := f.ReadDirect(tc.win, tc.off); !errors.Is(err, source.ErrNoDirect) {
			t.Errorf("%s: err %v, want ErrNoDirect", tc.name, err)
		}
	}
	// The last page of a file is short: the read stops at the end.
	last := alignDown(int64(len(data)) - 1)
	n, err := f.ReadDirect(slab[:2*align], last)
	if err != nil || int64(n) != int64(len(data))-last || !bytes.Equal(slab[:n], data[last:]) {
		t.Fatalf("read of the last page: %d bytes, %v; want the %d bytes of the file from %d", n, err, int64(len(data))-last, last)
	}
	if errors.Is(err, syscall.EINVAL) {
		t.Fatal("EINVAL leaked")
	}
}
