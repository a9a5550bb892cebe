package shuffler

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"golang.org/x/sys/unix"
)

// BenchmarkGrabEpochRead reads one whole epoch of 64 MiB of 1 KiB records
// in a random record order: grab with the part fitting in half of the
// memory (its blocks loaded once, records gathered from the slab), grab
// without (records read one by one), and full for comparison. A fresh
// loader per epoch, and the file's pages dropped from the page cache
// before each (POSIX_FADV_DONTNEED, this file only): the source comes
// from the disk.
//
//	go test -run '^$' -bench GrabEpochRead -benchtime 3x ./shuffler
func BenchmarkGrabEpochRead(b *testing.B) {
	root := b.TempDir()
	f, err := os.Create(filepath.Join(root, "data.tfrecord"))
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := formats.NewWriter(bw)
	payload := make([]byte, 1008)
	for i := range 64 << 10 {
		payload[0], payload[1] = byte(i), byte(i>>8)
		if err := w.Write(payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	ix, err := index.Build(b.Context(), blocktest.Dir(b, root, false), index.Options{BlockSize: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, strategy string
		mem            int64
	}{{"grab-gather", "grab", 256 << 20}, {"grab-records", "grab", 64 << 20}, {"full", "full", 64 << 20}} {
		b.Run(c.name, func(b *testing.B) {
			pl, err := NewPlanner(ix, Params{Strategy: c.strategy, Seed: 1, Buffer: BufferSize{Percent: 10}, MaxMemory: c.mem})
			if err != nil {
				b.Fatal(err)
			}
			plan, err := pl.Plan(0, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			p := make([]byte, 1<<20)
			b.SetBytes(plan.Size)
			for b.Loop() {
				b.StopTimer()
				dropPages(b, filepath.Join(root, "data.tfrecord"))
				b.StartTimer()
				s := NewStream(pl, blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: c.mem}), plan)
				for off := int64(0); off < plan.Size; off += int64(len(p)) {
					if _, err := s.ReadAt(b.Context(), p, off); err != nil {
						b.Fatal(err)
					}
				}
				s.Close()
			}
		})
	}
}

func dropPages(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}
