package blockcache

// Runs: the blocks of a load that lie next to each other in one file of a
// store that bills requests, read with one ranged GET. An object store's
// cost is per request, not per byte: MinIO on this machine serves 1 MiB
// ranges at 0.45x the speed of whole objects, 4-8 MiB ranges at about
// 0.8x (BENCHMARKS.md, issue 25). A buffer that holds a whole part reads
// every object whole, block by block; one GET for each run of adjacent
// blocks reads it with a few large requests instead. Where each block
// lands in the slab does not change (each is a range of the GET's body,
// read into its own place), nor does any check: every block is checked
// and marked arrived as its bytes are in.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
)

// DefaultRunBytes is the most bytes one GET reads of adjacent blocks by
// default: at 8 GETs in flight MinIO served 4 and 8 MiB ranges at
// 1.3-1.4 GB/s, 1 MiB ranges at 0.74.
const DefaultRunBytes = 8 << 20

// runsInFlight is how many GETs a load of adjacent blocks is cut into at
// least, runs permitting (each at least minRunBytes): fewer, larger GETs
// cost the store less, but a load of only a few leaves the link idle
// (8 in flight reached the best speeds above).
const runsInFlight = 8

// minRunBytes is the smallest run a load is cut into to keep runsInFlight
// GETs in flight: 2 MiB ranges are still 1.35x faster than 1 MiB ones.
const minRunBytes = 2 << 20

// runs returns the extents of a load in the groups they are read in, each
// group read with one request, the groups in the order they are to be
// read: by the first place in order (the extents' read order; nil for
// their own) of any of their extents. When coalesce is false every
// extent is a group of its own. Otherwise the extents that follow each
// other in one file are a chain, cut into about equal runs of at most
// about limit bytes (a run ends at the extent boundary nearest its share,
// so it may pass limit by less than an extent).
func runs(exts []extent, order []int, coalesce bool, limit int64) [][]int {
	rank := make([]int, len(exts))
	if order != nil {
		for k, i := range order {
			rank[i] = k
		}
	} else {
		for i := range rank {
			rank[i] = i
		}
	}
	flat := make([]int, len(exts))
	for i := range flat {
		flat[i] = i
	}
	out := make([][]int, 0, len(exts))
	if !coalesce || len(exts) < 2 {
		slices.SortFunc(flat, func(a, b int) int { return cmp.Compare(rank[a], rank[b]) })
		for k := range flat {
			out = append(out, flat[k:k+1:k+1])
		}
		return out
	}
	var total int64
	for _, e := range exts {
		total += e.n
	}
	limit = runLimit(total, limit)
	slices.SortFunc(flat, func(a, b int) int {
		return cmp.Or(cmp.Compare(exts[a].file, exts[b].file), cmp.Compare(exts[a].off, exts[b].off))
	})
	for lo := 0; lo < len(flat); {
		hi := lo + 1
		for hi < len(flat) && adjacent(exts[flat[hi-1]], exts[flat[hi]]) {
			hi++
		}
		out = cutChain(out, exts, flat[lo:hi:hi], limit)
		lo = hi
	}
	first := func(r []int) int {
		m := rank[r[0]]
		for _, i := range r[1:] {
			m = min(m, rank[i])
		}
		return m
	}
	slices.SortStableFunc(out, func(a, b []int) int { return cmp.Compare(first(a), first(b)) })
	return out
}

// runLimit is the run size for a load of total bytes of blocks: limit,
// but smaller, to at least minRunBytes, when fewer than runsInFlight runs
// of limit would read the load.
func runLimit(total, limit int64) int64 {
	return max(min(limit, total/runsInFlight), min(limit, minRunBytes))
}

// adjacent reports whether b begins in its file where a ends: both are
// read from the store with one GET. Only blocks: a record's frame and its
// file's tail are not in the store as they are served.
func adjacent(a, b extent) bool {
	return a.block >= 0 && b.block >= 0 && a.file == b.file && a.off+a.n == b.off
}

// cutChain appends chain, extents adjacent in one file in file order, cut
// into k = ceil(bytes/limit) runs of about equal size: each run ends at
// the extent boundary nearest to its share.
func cutChain(out [][]int, exts []extent, chain []int, limit int64) [][]int {
	var n int64
	for _, i := range chain {
		n += exts[i].n
	}
	k := int(min(int64(len(chain)), max(1, (n+limit-1)/max(limit, 1))))
	var at int64 // bytes of chain[:j]
	j, lo := 0, 0
	for r := 1; r < k; r++ {
		share := n * int64(r) / int64(k)
		// Move j to the boundary nearest share, leaving at least one
		// extent for this run and each run after it.
		for j < len(chain)-(k-r) && (j <= lo || abs(at+exts[chain[j]].n-share) <= abs(at-share)) {
			at += exts[chain[j]].n
			j++
		}
		out = append(out, chain[lo:j:j])
		lo = j
	}
	return append(out, chain[lo:len(chain):len(chain)])
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// coalesces reports whether a load of exts may read adjacent blocks with
// one request: blocks (not records) of a store that bills requests, not
// compressed (a compressed file's blocks are decompressed, not fetched).
func (l *Loader) coalesces(u Unit, exts []extent) bool {
	return l.fetch.runBytes > 0 && u.Records == nil && !index.IsLocal(l.src) && !l.compressed(exts)
}

// readRun reads group g of a load of b, extents adjacent in one file,
// under one read slot: those the disk cache holds from it, the rest with
// one request for each piece of them still adjacent. Each extent is
// checked, counted and marked arrived as its bytes are in. It returns the
// extent that failed, with its error.
func (l *Loader) readRun(b *Buf, files *fileSet, exts []extent, g []int, split func(int) *splitter) (int, error) {
	pending := make([]int, 0, len(g))
	sps := make([]*splitter, 0, len(g))
	for _, i := range g {
		sp := split(i)
		cached, err := l.readCachedExtent(b, exts[i], sp.filled)
		if !cached {
			pending, sps = append(pending, i), append(sps, sp)
			continue
		}
		if err != nil {
			return i, err
		}
		if b.partial {
			b.arr.arrive(i)
		}
		// The extents before it are no longer adjacent to those after.
		if len(pending) > 0 {
			if i, err := l.readAdjacent(b, files, exts, pending, sps); err != nil {
				return i, err
			}
			pending, sps = pending[:0], sps[:0]
		}
	}
	if len(pending) == 0 {
		return -1, nil
	}
	return l.readAdjacent(b, files, exts, pending, sps)
}

// readAdjacent reads the extents idx of b, adjacent in one file in file
// order, with one request of a source.RunRequester (with a read each from
// any other file), checking each with its splitter in sps.
func (l *Loader) readAdjacent(b *Buf, files *fileSet, exts []extent, idx []int, sps []*splitter) (int, error) {
	first := exts[idx[0]]
	f, err := files.acquire(first.file, first.off)
	if err != nil {
		l.fetched(b, first, 0, err)
		return idx[0], err
	}
	defer files.release(f)
	rr, ok := f.File.(source.RunRequester)
	if !ok || len(idx) == 1 {
		for j, i := range idx {
			gets, err := l.readExtent(f, exts[i], b.Data, false, sps[j].filled)
			l.fetched(b, exts[i], gets, err)
			if err != nil {
				return i, err
			}
			if b.partial {
				b.arr.arrive(i)
			}
		}
		return -1, nil
	}
	ps := make([][]byte, len(idx))
	for j, i := range idx {
		e := exts[i]
		ps[j] = b.Data[e.at : e.at+e.n]
	}
	in := 0 // extents in and checked
	gets, err := rr.ReadRunCounted(ps, first.off, func(j int) error {
		e := exts[idx[j]]
		if err := sps[j].filled(e.n); err != nil {
			return err
		}
		l.counted(e.n, false)
		// Its bytes, and an offer to the disk cache; the run's GETs
		// are counted once, below.
		l.fetched(b, e, 0, nil)
		if b.partial {
			b.arr.arrive(idx[j])
		}
		in++
		return nil
	})
	if err == nil && in != len(idx) {
		// Never served unchecked: a block not handed on has no records.
		err = fmt.Errorf("read %s at offset %d: the source handed on %d of the %d blocks of one request", f.Name(), first.off, in, len(idx))
	}
	if err != nil {
		if !errors.Is(err, syscall.EIO) {
			err = fmt.Errorf("%w: %w", err, syscall.EIO)
		}
		i := idx[min(in, len(idx)-1)]
		l.fetched(b, exts[i], gets, err)
		return i, err
	}
	l.addEpoch(b.unit.Epoch, EpochStats{SourceGETs: gets})
	return -1, nil
}
