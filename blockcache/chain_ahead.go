package blockcache

// Proving a gap of a remote file in parallel: its blocks read whole, a few
// at once, each block's record chain checked from its own probed start.
//
// Why. A walk settles the cuts between the last proven boundary of a file
// and the block to be served (probe_proof.go). In a first epoch the gaps
// are most of each file: a buffer holds a third of the blocks, at random.
// Where records are smaller than a walk's window (chainWindow), a walk
// reads every byte of the gap anyway, in windows that follow each other:
// one file's walk is as fast as one request at a time (at 100 KiB records
// in 1 MiB blocks from MinIO: 1,320 GETs and 347 MB for the first buffer
// of a 512 MiB dataset, 2.7 s for an epoch that whole-object GETs read in
// 0.33 s).
//
// How, and why it proves the same. Block k of the gap spans [cut k,
// cut k+1). Read whole, its chain from cut k either lands exactly on
// cut k+1 or it does not. If it lands, then cut k+1 is true whenever cut k
// is (a walk from a true boundary meets the file's own boundaries), so a
// walk that reaches cut k proven true may jump to cut k+1 — as it does over
// a block the loader tiled (TilingProvesEnd). Nothing is taken on trust:
// the jumps still start at the start of the file's records, and a block
// whose chain does not land is walked as before, which settles its cuts
// (a false cut is found false, a broken chain broken). The checks of many
// blocks are independent, so they run at once, in ranged GETs of adjacent
// blocks up to aheadRange.

import (
	"sync"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
)

const (
	// aheadRange is the most bytes of adjacent blocks read by one ReadAt
	// of a gap (an object store's source may split it into parallel
	// GETs): MinIO on this machine serves 4 MiB ranges at 1.7x the rate of
	// 1 MiB ones (BENCHMARKS.md, issue 25).
	aheadRange = 4 << 20
	// aheadInFlight is how many such reads a prover makes at once, all its
	// walks together: their buffers, aheadRange each, are the prover's
	// memory beside the loader's budget (16 MiB, as the 8 remote walks'
	// windows of 2 MiB were).
	aheadInFlight = 4
	// keptRange and keptInFlight are aheadRange and aheadInFlight for the
	// reads that are kept (walked.go, aheadOfLoad): those land in slabs
	// the budget pays for, not in the prover's buffers, and each is one
	// GET (source.RunRequester), not split. MinIO on this machine read a
	// first load of 530 MB in 0.55-0.63 s with 8 GETs of 8 MiB at once,
	// against 0.96-1.02 s with 4 reads of 4 MiB split in GETs of 2 MiB
	// (BENCHMARKS.md, issue 25).
	keptRange    = 8 << 20
	keptInFlight = 8
	// aheadSlack is read past a run of blocks where the file goes on: a
	// tar walk decides that a sample starts at a cut from the member
	// header there.
	aheadSlack = 4 << 10
)

// aheadReads is a prover's reads of gaps: a slot and a buffer per read in
// flight, and where the blocks read go for the loads that need them.
type aheadReads struct {
	bufs  chan []byte
	slots chan struct{} // keptInFlight, for the reads of chainAhead's keptOnly
	keep  walkKeeper    // nil: dropped once checked
}

// walkKeeper keeps blocks a gap read checked, for the later loads that
// hold them: the Loader (walked.go).
type walkKeeper interface {
	// walkRoom returns room for n bytes to be kept, or nil.
	walkRoom(n int64) *walkedRun
	// keepWalked keeps blocks of run, read from file offset off; it
	// gives run back if it keeps none.
	keepWalked(run *walkedRun, off int64, blocks []int32)
}

func newAheadReads() *aheadReads {
	a := &aheadReads{bufs: make(chan []byte, aheadInFlight), slots: make(chan struct{}, keptInFlight)}
	for range aheadInFlight {
		a.bufs <- nil // allocated when first used
	}
	return a
}

// dense reports whether the records of file fi, as far as the loader has
// learned them, are shorter on average than a walk's window: then a walk
// reads the whole gap anyway, and reading it as blocks costs no more bytes.
// Where records are long a walk reads a header a record, far fewer bytes.
func (p *prover) dense(fi int32) bool {
	if p.learned == nil {
		return false
	}
	fp := &p.files[fi]
	var bytes, records int64
	for j := range fp.n {
		if n := p.learned[fp.first+j].Load(); n > 0 {
			bytes += p.ix.Blocks[fp.first+j].Len
			records += int64(n)
		}
	}
	return records > 0 && bytes/records < formats.ChainWindow
}

// aheadNeeded reports whether block k of file fi would be read by a walk
// that reaches its start: not empty, not checked already, and not a block
// the loader tiled (a jump for a format whose tiling proves the end).
func (p *prover) aheadNeeded(fi, k int32) bool {
	fp := &p.files[fi]
	if fp.chained != nil && fp.chained[k] || p.cut(fi, k) == p.cut(fi, k+1) {
		return false
	}
	return !p.chain.TilingProvesEnd() || p.learned[fp.first+k].Load() == 0
}

// gapAhead reports whether a walk of file fi to cut target has blocks to
// check ahead, leaving out those of a load in (nil: none). Called under
// the file's mu.
func (p *prover) gapAhead(fi, target int32, in map[int32]bool) bool {
	fp := &p.files[fi]
	for k := fp.next; k < min(target, fp.n); k++ {
		if p.aheadNeeded(fi, k) && !in[fp.first+k] {
			return true
		}
	}
	return false
}

// chainAhead reads the blocks of file fi from its next unsettled cut to
// cut target, in runs of adjacent blocks, and marks those whose record
// chain from their start lands on their end (fileProof.chained). A read
// that fails marks nothing: the walk then reads those bytes itself and
// reports what is wrong. With keptOnly a run the keeper has no room for
// is left out. Called under the file's mu.
func (p *prover) chainAhead(fi, target int32, r countedReader, keptOnly bool) {
	fp := &p.files[fi]
	if fp.chained == nil {
		fp.chained = make([]bool, fp.n)
	}
	type run struct{ lo, hi int32 } // blocks lo to hi-1
	var runs []run
	limit := int64(aheadRange)
	if keptOnly {
		limit = keptRange
	}
	for k := fp.next; k < min(target, fp.n); k++ {
		if !p.aheadNeeded(fi, k) {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].hi == k && p.cut(fi, k+1)-p.cut(fi, runs[n-1].lo) <= limit {
			runs[n-1].hi++
			continue
		}
		runs = append(runs, run{k, k + 1})
	}
	head := p.ix.Files[fi].Head
	var wg sync.WaitGroup
	for _, rn := range runs {
		var buf []byte
		if keptOnly {
			p.ahead.slots <- struct{}{}
		} else {
			buf = <-p.ahead.bufs
		}
		wg.Go(func() {
			defer func() {
				if keptOnly {
					<-p.ahead.slots
				} else {
					p.ahead.bufs <- buf
				}
			}()
			lo := p.cut(fi, rn.lo)
			end := min(head.End, p.cut(fi, rn.hi)+aheadSlack)
			var run *walkedRun // the read is kept in it, if room
			if p.ahead.keep != nil {
				run = p.ahead.keep.walkRoom(end - lo)
			}
			if run == nil && keptOnly {
				return
			}
			data := buf
			if run != nil {
				data = run.data
			} else if int64(cap(buf)) < end-lo {
				buf = make([]byte, max(end-lo, aheadRange+aheadSlack))
				data = buf
			}
			held := formats.Held{Data: data[:end-lo], Off: lo}
			var ids []int32
			if err := r.readOnce(held.Data, lo); err == nil {
				h := head
				h.End = end
				for k := rn.lo; k < rn.hi; k++ {
					at, err := p.chain.ChainFrom(held, h, p.cut(fi, k), p.cut(fi, k+1))
					fp.chained[k] = err == nil && at == p.cut(fi, k+1)
					if fp.chained[k] && run != nil {
						ids = append(ids, fp.first+k)
					}
				}
			}
			if run != nil {
				p.ahead.keep.keepWalked(run, lo, ids)
			}
		})
	}
	wg.Wait()
}

// aheadOfLoad reads, before a load reads blocks ids, what the walks
// proving them will cross after it (proveRead) together with the load's
// own blocks among it, from each file's last settled cut to the load's
// last block there: in a first epoch, most of each file, read in runs of
// adjacent blocks up to keptRange instead of a GET for each of the
// load's blocks (or each run of them) and then the walk's reads of the
// gaps between them. Each block is kept (walked.go): the load takes its
// own, the later loads theirs. Only while the keeper has room: a read
// that is not kept would be read again, and a walk over records longer
// than its window reads only their headers. A file with no gap, all of
// whose unsettled blocks up to there are the load's, is left to the
// load's own runs (runs.go), as large and as many at once as it likes.
// TFRecord only, whose walk jumps over every block whose chain was seen
// to land.
func (p *prover) aheadOfLoad(ids []int32) {
	if p.ahead == nil || p.ahead.keep == nil || !p.chain.TilingProvesEnd() {
		return
	}
	targets := map[int32]int32{}
	in := make(map[int32]bool, len(ids))
	for _, id := range ids {
		fi := p.ix.Blocks[id].File
		in[id] = true
		last := id - p.files[fi].first
		if t, ok := targets[fi]; !ok || last > t {
			targets[fi] = last
		}
	}
	var wg sync.WaitGroup
	for fi, t := range targets {
		wg.Go(func() {
			fp := &p.files[fi]
			fp.mu.Lock()
			defer fp.mu.Unlock()
			if fp.next > t || fp.broken != nil || !p.gapAhead(fi, t, in) {
				return
			}
			f := p.ix.Files[fi]
			sf, err := p.ix.Source().Open(f.Path, f.Version)
			if err != nil {
				return // the walk reports it
			}
			defer sf.Close()
			p.chainAhead(fi, t+1, countedReader{sf, p}, true)
		})
	}
	wg.Wait()
}

// readOnce reads len(b) bytes at off with one request where the source
// can (source.RunRequester): a gap read runs beside others, which keep
// the link full, and more, smaller GETs would only cost the store more.
func (c countedReader) readOnce(b []byte, off int64) error {
	rr, ok := c.r.(source.RunRequester)
	if !ok {
		_, err := c.ReadAt(b, off)
		return err
	}
	gets, err := rr.ReadRunCounted([][]byte{b}, off, nil)
	c.p.reads.Add(gets)
	if err == nil {
		c.p.bytes.Add(int64(len(b)))
	}
	return err
}
