package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// evictSource drops the files of src from the page cache, so that the next
// read of them goes to the disk.
func evictSource(t *testing.T, src string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no source files in %s: %v", src, err)
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		// Dirty pages stay cached: written back first, they can go.
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

func TestEpochsReadDirectlyFromDiskEqualThoseReadThroughThePageCache(t *testing.T) {
	// 1 MiB blocks, the smallest read directly, of 1 KiB records that
	// start anywhere in a page.
	src := genSynthetic(t, 12000, 240, 4, 3, "clustered")
	flags := []string{"--seed", "11", "--block-size", "1MiB", "--buffer", "3MiB", "--parts", "2"}
	read := func(m *mount) [][]byte {
		var parts [][]byte
		for e := range 2 {
			for p := range 2 {
				evictSource(t, src)
				parts = append(parts, m.read(e, p, 2))
			}
		}
		return parts
	}
	direct := startMount(t, src, flags...)
	got := read(direct)
	ds := direct.stats()
	direct.stop()
	if ds.DirectBytesRead < ds.BytesRead/2 {
		t.Errorf("with the source out of the page cache, %d of %d bytes were read directly, want most", ds.DirectBytesRead, ds.BytesRead)
	}

	buffered := startMount(t, src, append(flags, "--direct-io=false")...)
	want := read(buffered)
	if bs := buffered.stats(); bs.DirectBytesRead != 0 || bs.BytesRead == 0 {
		t.Errorf("--direct-io=false: %d of %d bytes read directly, want none", bs.DirectBytesRead, bs.BytesRead)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("epoch %d part %d: %d bytes read directly differ from the %d read through the page cache", i/2, i%2, len(got[i]), len(want[i]))
		}
		recs := frames(t, got[i])
		if len(recs) == 0 {
			t.Fatalf("epoch %d part %d holds no records", i/2, i%2)
		}
	}
}
