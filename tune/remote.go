package tune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// RemoteSizes are the block sizes ProbeRemote measures by default: a
// small block, a page-cache-sized one, the default block and a large
// one. An object store's request latency, not its disk, decides which is
// fast enough, so four points tell it; a doubling sweep would cost a
// request-bound minute per size.
func RemoteSizes() []int64 { return []int64{64 << 10, 1 << 20, 8 << 20, 32 << 20} }

// RemoteFile is one object of a remote source, opened for ranged reads
// (each ReadAt one GET, as a mount makes them).
type RemoteFile struct {
	Name string
	Size int64
	R    io.ReaderAt
}

// ProbeRemote measures ranged GETs of the files at each block size, with
// o.InFlight requests at a time, as Probe does for local files (same
// budget, time and rounds; median of the rounds), and then, at the
// recommended size, with fewer requests in flight: 1/16 and 1/4 of
// o.InFlight (at least 1). Report.Concurrency is then the fewest requests
// in flight within 10% of the best, which a mount's --s3-concurrency needs
// no more than. No page cache or O_DIRECT is involved: the figures are the
// store's and the network's.
func ProbeRemote(ctx context.Context, files []RemoteFile, o ProbeOptions) (StorageReport, error) {
	if len(o.Sizes) == 0 {
		o.Sizes = RemoteSizes()
	}
	o.fill()
	rep := StorageReport{Remote: true, Direct: true, Cached: -1}
	if len(files) == 0 {
		return rep, errors.New("no files to probe")
	}
	sizes := make([]ProbeFile, len(files))
	for i, f := range files {
		sizes[i] = ProbeFile{Path: f.Name, Size: f.Size}
	}
	progress, total := probeProgress(o, sizes)
	measure := func(size int64, inFlight int, salt uint64) ([]Throughput, error) {
		var ts []Throughput
		round := o
		round.Time = o.Time / time.Duration(o.Rounds)
		// Every read in flight holds a buffer of size bytes, as a
		// mount's loader does within --max-memory.
		inFlight = max(1, min(inFlight, int(remoteBufferBytes/size)))
		round.InFlight = inFlight
		round.Bytes = max(1, min(o.Bytes, eligible(sizes, size))/int64(o.Rounds))
		for r := range o.Rounds {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			t, err := probeRemoteSize(ctx, files, size, round, salt<<8|uint64(r), progress)
			if err != nil {
				return nil, err
			}
			t.InFlight = inFlight
			ts = append(ts, t)
		}
		return ts, nil
	}
	for i, size := range o.Sizes {
		ts, err := measure(size, o.InFlight, uint64(i))
		if err != nil {
			return rep, err
		}
		rep.Sizes = append(rep.Sizes, median(ts))
	}
	rep.Smallest, rep.Best = Recommend(rep.Sizes, o.Floor)
	rep.Recommended = rep.Smallest
	if rep.Recommended == 0 {
		return rep, errors.New("probe: no object is as large as the smallest block size probed")
	}

	// Fewer requests in flight at the recommended size: the smallest
	// count within 10% of the best is what a mount needs.
	best := Throughput{}
	for _, t := range rep.Sizes {
		if t.BlockSize == rep.Recommended {
			best = t
		}
	}
	counts := []int{}
	for _, n := range []int{best.InFlight / 16, best.InFlight / 4} {
		if n >= 1 && n < best.InFlight && (len(counts) == 0 || counts[len(counts)-1] != n) {
			counts = append(counts, n)
		}
	}
	for j, n := range counts {
		ts, err := measure(rep.Recommended, n, uint64(len(o.Sizes)+j))
		if err != nil {
			return rep, err
		}
		rep.InFlight = append(rep.InFlight, median(ts))
	}
	rep.InFlight = append(rep.InFlight, best)
	rep.Concurrency = best.InFlight
	for _, t := range rep.InFlight {
		if t.MBps >= 0.9*best.MBps && t.InFlight < rep.Concurrency {
			rep.Concurrency = t.InFlight
		}
	}
	if o.Progress != nil {
		o.Progress(total, total)
	}
	return rep, nil
}

// probeRemoteSize makes ranged reads of size bytes at random offsets of
// the files at least that large (chosen in proportion to their sizes),
// o.InFlight at a time, until o.Bytes or o.Time.
func probeRemoteSize(ctx context.Context, files []RemoteFile, size int64, o ProbeOptions, salt uint64, progress func(int64)) (Throughput, error) {
	t := Throughput{BlockSize: size}
	var idx []int
	var weights []int64 // cumulative offsets per eligible file
	var offsets int64
	for i, f := range files {
		if f.Size >= size {
			offsets += f.Size - size + 1
			idx = append(idx, i)
			weights = append(weights, offsets)
		}
	}
	if len(idx) == 0 {
		t.Skipped = "no object is this large"
		return t, nil
	}
	bufs := make([][]byte, o.InFlight)
	for w := range bufs {
		bufs[w] = make([]byte, size)
	}
	return randomReads(ctx, t, o, o.Bytes, weights, salt, bufs, func(buf []byte, j int, slot int64) (int, error) {
		// 4 KiB aligned where the object allows, as a block edge
		// usually is not: the store should not care.
		off := slot &^ (dioAlignRemote - 1)
		f := files[idx[j]]
		n, err := f.R.ReadAt(buf, off)
		if err != nil && n < len(buf) {
			return n, fmt.Errorf("probe: reading %d bytes of %s at offset %d: %w", size, f.Name, off, err)
		}
		return n, nil
	}, progress)
}

const dioAlignRemote = 4096

// remoteBufferBytes bounds the buffers of the reads in flight: 64 reads
// of 32 MiB would hold 2 GiB, more than a mount's default --max-memory
// lets its loader have in flight.
const remoteBufferBytes = 256 << 20
