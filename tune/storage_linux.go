package tune

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dioAlign is the alignment of direct reads (offset, length and memory),
// as in blockcache.
const dioAlign = 4096

// Probe measures random-read throughput of the files at each block size.
// Reads are issued o.InFlight at a time by as many goroutines, each into
// its own page-aligned buffer, at random offsets aligned to 4 KiB in a
// file chosen in proportion to the offsets it offers; a size stops after
// o.Bytes (or every byte of the files that are large enough, if fewer) or
// o.Time, split evenly over o.Rounds rounds. A size larger than every file
// is skipped.
func Probe(ctx context.Context, files []ProbeFile, o ProbeOptions) (StorageReport, error) {
	o.fill()
	var rep StorageReport
	if len(files) == 0 {
		return rep, errors.New("no files to probe")
	}
	rep.Cached = cachedFraction(files)
	fds := make([]*os.File, len(files))
	defer func() {
		for _, f := range fds {
			if f != nil {
				f.Close()
			}
		}
	}()
	direct, err := openAll(files, fds)
	if err != nil {
		return rep, err
	}
	rep.Direct = direct
	rep.Warm = !direct && rep.Cached > 0.5

	progress, total := probeProgress(o, files)
	// Every size is measured in o.Rounds rounds over all sizes, and its
	// figure is the median of its rounds: on a shared machine a burst of
	// someone else's I/O then spoils one round of a size, not its figure.
	rounds := make([][]Throughput, len(o.Sizes))
	round := o
	round.Time = o.Time / time.Duration(o.Rounds)
	for r := range o.Rounds {
		for i, size := range o.Sizes {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			round.Bytes = max(1, min(o.Bytes, eligible(files, size))/int64(o.Rounds))
			t, err := probeSize(ctx, files, fds, size, round, uint64(r*len(o.Sizes)+i), progress)
			if err != nil {
				return rep, err
			}
			rounds[i] = append(rounds[i], t)
		}
	}
	for _, ts := range rounds {
		rep.Sizes = append(rep.Sizes, median(ts))
	}
	rep.Smallest, rep.Best = Recommend(rep.Sizes, 0)
	rep.Recommended, _ = Recommend(rep.Sizes, o.Floor)
	if rep.Recommended == 0 {
		// No file is as large as the floor: its blocks are small anyway.
		rep.Recommended = rep.Smallest
	}
	if o.Progress != nil {
		o.Progress(total, total)
	}
	return rep, nil
}

// openAll opens every file with O_DIRECT, or every file without it when
// the file system refuses it (tmpfs, some FUSE and network file systems).
func openAll(files []ProbeFile, fds []*os.File) (direct bool, err error) {
	closeAll := func() {
		for i, f := range fds {
			if f != nil {
				f.Close()
				fds[i] = nil
			}
		}
	}
	for i, f := range files {
		fds[i], err = os.OpenFile(f.Path, os.O_RDONLY|syscall.O_DIRECT, 0)
		if err == nil {
			err = tryDirect(fds[i], f.Size)
		}
		if errors.Is(err, syscall.EINVAL) {
			closeAll()
			break
		}
		if err != nil {
			closeAll()
			return false, fmt.Errorf("probe: open %s: %w", f.Path, err)
		}
		if i == len(files)-1 {
			return true, nil
		}
	}
	for i, f := range files {
		if fds[i], err = os.Open(f.Path); err != nil {
			closeAll()
			return false, fmt.Errorf("probe: open %s: %w", f.Path, err)
		}
	}
	return false, nil
}

// tryDirect makes one small direct read, which is where a file system
// that accepts O_DIRECT at open but not at read says so.
func tryDirect(f *os.File, size int64) error {
	if size < dioAlign {
		return nil
	}
	buf, err := alignedBuf(dioAlign)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	_, err = f.ReadAt(buf, 0)
	return err
}

func alignedBuf(n int64) ([]byte, error) {
	// Anonymous mappings are page aligned, which direct reads need.
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("probe: allocating a %d-byte read buffer: %w", n, err)
	}
	return b, nil
}

func probeSize(ctx context.Context, files []ProbeFile, fds []*os.File, size int64, o ProbeOptions, salt uint64, progress func(int64)) (Throughput, error) {
	t := Throughput{BlockSize: size}
	var idx []int
	var weights []int64 // cumulative count of offsets per eligible file
	var offsets int64
	for i, f := range files {
		if f.Size >= size {
			offsets += (f.Size-size)/dioAlign + 1
			idx = append(idx, i)
			weights = append(weights, offsets)
		}
	}
	if len(idx) == 0 {
		t.Skipped = "no file is this large"
		return t, nil
	}
	budget := min(o.Bytes, eligible(files, size))
	bufs := make([][]byte, 0, o.InFlight)
	defer func() {
		for _, b := range bufs {
			unix.Munmap(b)
		}
	}()
	for range o.InFlight {
		buf, err := alignedBuf(size)
		if err != nil {
			return t, err
		}
		bufs = append(bufs, buf)
	}
	return randomReads(ctx, t, o, budget, weights, salt, bufs, func(buf []byte, j int, slot int64) (int, error) {
		off := slot * dioAlign
		fi := idx[j]
		n, err := fds[fi].ReadAt(buf, off)
		if err != nil && n < len(buf) {
			return n, fmt.Errorf("probe: reading %d bytes of %s at offset %d: %w", size, files[fi].Path, off, err)
		}
		return n, nil
	}, progress)
}

// cachedFraction returns the fraction of the files' bytes in the page
// cache, asking cachestat(2) (Linux 6.5 on) or, where it is missing,
// mincore(2) on a mapping of the file; -1 if neither answers.
func cachedFraction(files []ProbeFile) float64 {
	var pages, cached int64
	for _, f := range files {
		n := (f.Size + dioAlign - 1) / dioAlign
		c, ok := cachedPages(f)
		if !ok {
			return -1
		}
		pages += n
		cached += c
	}
	if pages == 0 {
		return 0
	}
	return float64(cached) / float64(pages)
}

func cachedPages(pf ProbeFile) (int64, bool) {
	f, err := os.Open(pf.Path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return cachedRange(f, 0, pf.Size)
}
