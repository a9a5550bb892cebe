//go:build linux

package diskcache

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/slab"
	"golang.org/x/sys/unix"
)

// BenchmarkColdEntries reads entries of 1 MiB blocks that are not in the
// page cache, several at once (24 is --s3-concurrency's default), as a
// loader reads a buffer from the disk cache: into whole pages with
// O_DIRECT ("pages") and through the page cache ("buffered"). It reports
// the CPU the process spent per GiB besides the time:
//
//	go test -run '^$' -bench ColdEntries -benchtime 5x ./diskcache
func BenchmarkColdEntries(b *testing.B) {
	const blocks, size = 128, 1 << 20
	root := b.TempDir()
	ix := &index.Index{Root: root, Files: []index.File{{Path: "f", Size: blocks * (size + 100), Mtime: 1}}}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	crc := formats.UpdateChecksum(0, data)
	for i := range blocks {
		// Blocks that do not start at a page boundary, as blocks cut at
		// record boundaries do not.
		ix.Blocks = append(ix.Blocks, index.Block{File: 0, Offset: int64(i*(size+100) + 100), Len: size, CRC: crc})
	}
	dir := filepath.Join(b.TempDir(), "dc")
	c, err := Open(ix, Options{Dir: dir, MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ext := func(id int) Extent {
		blk := ix.Blocks[id]
		return Extent{File: 0, Block: int32(id), Off: blk.Offset, Len: blk.Len}
	}
	for id := range blocks {
		key := c.key(ext(id))
		c.store(diskJob{name: nameOf(key), key: key, ext: ext(id), epoch: 0, data: data})
	}
	// The slab of a buffer of all blocks, each in pages of its own.
	var span int64
	at := make([]int64, blocks)
	for id := range blocks {
		lead := pageLead(ext(id))
		at[id] = span + lead
		span += index.AlignUp(lead + size)
	}
	mem, err := slab.Map(span)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { slab.Unmap(mem) }()
	for _, v := range []struct {
		mode          string
		readers       int
		fresh, advise bool
	}{{"pages", 8, false, false}, {"pages", 24, false, false}, {"pages", 64, false, false},
		{"buffered", 4, false, false}, {"buffered", 24, false, false}, {"buffered", 64, false, false},
		{"buffered", 24, false, true}, {"pages", 24, true, false}, {"buffered", 24, true, false}} {
		mode, readers := v.mode, v.readers
		name := fmt.Sprintf("%s-%d", mode, readers)
		if v.fresh {
			// A new slab each time, as a loader maps one per buffer: the
			// reads fault its pages in.
			name += "-fresh-slab"
		}
		if v.advise {
			// Every entry of the buffer hinted (POSIX_FADV_WILLNEED)
			// before the reads, as a loader could when a load starts.
			name += "-willneed"
		}
		b.Run(name, func(b *testing.B) {
			var cpu float64
			for b.Loop() {
				b.StopTimer()
				if v.fresh {
					slab.Unmap(mem)
					if mem, err = slab.Map(span); err != nil {
						b.Fatal(err)
					}
				}
				evict(b, dir)
				var ru0, ru1 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
				b.StartTimer()
				if v.advise {
					willNeed(b, dir)
				}
				var next, failed atomic.Int64
				var wg sync.WaitGroup
				for range readers {
					wg.Go(func() {
						for id := int(next.Add(1) - 1); id < blocks; id = int(next.Add(1) - 1) {
							e := ext(id)
							dst := mem[at[id] : at[id]+size]
							var ok bool
							if mode == "pages" {
								lead := pageLead(e)
								ok = c.ReadExtentPages(e, mem[at[id]-lead:at[id]-lead+index.AlignUp(lead+size)])
							} else {
								ok = c.ReadExtent(e, dst)
							}
							if !ok {
								failed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
				cpu += float64(ru1.Utime.Nano()-ru0.Utime.Nano()+ru1.Stime.Nano()-ru0.Stime.Nano()) / 1e9
				if failed.Load() > 0 {
					b.Fatalf("%d entries not read", failed.Load())
				}
				b.StartTimer()
			}
			b.SetBytes(blocks * size)
			b.ReportMetric(cpu/float64(b.N)/(blocks*size)*(1<<30), "cpu-s/GiB")
		})
	}
	if s := c.Stats(); s.Damaged != 0 || s.Mismatched != 0 {
		b.Fatalf("stats %+v", s)
	}
}

// evict drops the entries in dir from the page cache.
func evict(b *testing.B, dir string) {
	b.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, de := range des {
		dropPages(b, filepath.Join(dir, de.Name()))
	}
}

// willNeed asks the kernel to read every entry in dir into the page cache,
// without waiting for it.
func willNeed(b *testing.B, dir string) {
	b.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, de := range des {
		fd, err := unix.Open(filepath.Join(dir, de.Name()), unix.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		unix.Fadvise(fd, 0, 0, unix.FADV_WILLNEED)
		unix.Close(fd)
	}
}
