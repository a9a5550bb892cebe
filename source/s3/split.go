package s3

// A large read as several ranged GETs at once. One S3 connection moves
// tens of MB/s and a GET pays its latency once: a block of 8 MiB fetched
// as one GET arrives at one connection's speed, after the slowest byte of
// it. Split into ranges of a few MiB fetched in parallel, it arrives at
// several connections' speed, and a reader waiting for that block waits
// less. Every range is a GET of its own, checked as any other (206, its
// exact Content-Range, the pinned ETag, its exact length) and retried on
// its own; the GETs in flight stay bounded by the source's semaphore
// (--s3-concurrency), whatever the reads split into.
//
// A read is split only into as many ranges as there are GET slots free
// when it starts: when every slot is taken (a buffer loading, --s3-
// concurrency blocks at once), the link is as full as the concurrency
// allows, and more, smaller GETs only cost more requests, which stores
// bill and serve at a cost of their own (versitygw on this machine: 1.26
// CPU s/GiB for GETs of 1 MiB, 0.60 for 8 MiB, 0.10 for whole objects;
// BENCHMARKS.md, issue 25). When slots are idle (the first block of an
// epoch, a reader waiting on one block) the split fills them.

import "sync"

// DefaultSplitSize is the largest range of one GET by default: 2 MiB
// amortises a GET's latency (tens of milliseconds on S3, ~1 ms on a
// local server) over enough bytes, and splits a default 8 MiB block
// into 4 GETs.
const DefaultSplitSize = 2 << 20

// splitAlign rounds the ranges of a split read to whole pages, so that
// each lands page-aligned in the loader's slab.
const splitAlign = 4 << 10

// ranges returns the size of each range of a read of n bytes, all but
// the last equal, and how many there are: 1 when n is at most split.
func ranges(n, split int64) (size int64, k int) {
	if split <= 0 || n <= split {
		return n, 1
	}
	parts := (n + split - 1) / split
	size = (n + parts - 1) / parts
	size = (size + splitAlign - 1) / splitAlign * splitAlign
	return size, int((n + size - 1) / size)
}

// splitFor returns the ranges of a read of n bytes when free GET slots
// are free: those of ranges, but no more than free, and one when none is.
func splitFor(n, split int64, free int) (size int64, k int) {
	size, k = ranges(n, split)
	if k > 1 && free < k {
		free = max(free, 1)
		size, k = ranges(n, (n+int64(free)-1)/int64(free))
	}
	return size, k
}

// ReadAt reads len(p) bytes at off: with one GET, or, above the split
// size, with one GET a range, all at once. It fails if any range fails
// (after that range's own tries), with the error of the first range that
// failed; the ranges read are still counted in the GET bytes.
func (o *object) ReadAt(p []byte, off int64) (int, error) {
	n, _, err := o.ReadAtCounted(p, off)
	return n, err
}

// ReadAtCounted is ReadAt, and says how many GETs it made
// (source.Requester).
func (o *object) ReadAtCounted(p []byte, off int64) (int, int64, error) {
	if len(p) == 0 {
		return 0, 0, nil
	}
	size, k := splitFor(int64(len(p)), o.s.split, cap(o.s.sem)-len(o.s.sem))
	if k == 1 {
		return o.readRange(p, off)
	}
	errs := make([]error, k)
	gets := make([]int64, k)
	var wg sync.WaitGroup
	for i := 1; i < k; i++ {
		lo := int64(i) * size
		hi := min(lo+size, int64(len(p)))
		wg.Go(func() { _, gets[i], errs[i] = o.readRange(p[lo:hi], off+lo) })
	}
	// The first range on this goroutine: one fewer to start.
	_, gets[0], errs[0] = o.readRange(p[:size], off)
	wg.Wait()
	var all int64
	for _, g := range gets {
		all += g
	}
	for _, err := range errs {
		if err != nil {
			return 0, all, err
		}
	}
	return len(p), all, nil
}
