package tests

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"
	"unsafe"

	"github.com/corgifs/corgifs/api"
	"golang.org/x/sys/unix"
)

// Two readers of one part, reading it in step, share its buffers: a unit
// loaded for one is found in memory by the other. stats.json counts what
// each reader got by where it came from: the bytes of the epoch from the
// source and from memory add up to at least what both read, the source
// gave each byte at most once, and at least one reader's worth came from
// memory. The
// reads bypass the kernel's page cache (O_DIRECT), so that each reaches
// corgifs.
func TestEpochMemoryBytesCountTheBytesASecondReaderFoundLoaded(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 600, 8, 2, 2, "clustered")
	s.upload("data", "mem", src)
	m := startMount(t, "s3://data/mem", "--seed", "2", "--block-size", "8KiB", "--max-memory", "256MiB", "--s3-endpoint", s.endpoint)
	var files [2]*os.File
	for i := range files {
		f, err := os.OpenFile(m.part(1, 0, 1), os.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			t.Fatalf("open with O_DIRECT: %v", err)
		}
		defer f.Close()
		files[i] = f
	}
	const chunk = 4096
	buf := alignedBuf(chunk)
	var n int64
	for off := int64(0); ; off += chunk {
		var got int
		for i, f := range files {
			k, err := f.ReadAt(buf, off)
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("reader %d at offset %d: %v", i, off, err)
			}
			got = k
		}
		n += int64(got)
		if got < chunk {
			break
		}
	}
	b, err := os.ReadFile(api.StatsPath(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	var st api.Stats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("stats.json: %v\n%s", err, b)
	}
	// A reader that takes a unit again (its buffer released between two
	// reads) finds it in memory again, which counts again: a sum of at
	// least, not exactly, what both read.
	if e := st.Epochs[1]; n == 0 || e.SourceBytes+e.DiskCacheBytes+e.MemoryBytes < 2*n || e.SourceBytes > n || e.MemoryBytes < n {
		t.Fatalf("two readers of epoch 1's %d bytes in step: source_bytes %d, disk_cache_bytes %d, memory_bytes %d; want a sum of at least %d, at most %d from the source and at least %d from memory\n%s",
			n, e.SourceBytes, e.DiskCacheBytes, e.MemoryBytes, 2*n, n, n, b)
	}
}

// alignedBuf is n bytes at a page boundary, as O_DIRECT reads need.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)) % 4096
	return b[off : off+n]
}
