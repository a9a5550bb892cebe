package blockcache

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
)

// Why a probed boundary has to be proven, and how.
//
// A probe takes bytes near a multiple of the block size for a record start
// when they look like one (formats.Prober). For TFRecord and tar that is a
// guess: a record whose payload is itself a TFRecord stream or a tar
// archive holds bytes that look exactly like records, and no window near
// the offset can tell them from the file's own records (the same bytes
// occur, as real records, in another valid file). The loader's check that
// a block's records tile it does not settle it either: a run of embedded
// records between two probed cuts tiles its block, and a chain of records
// from a false start may even fall back into step with the file's own.
//
// What does prove a boundary is the record chain from a boundary already
// proven. The start of a file's records is certain. Walking the records
// from a true boundary (TFRecord: each length says where the next frame
// starts; tar: each member header says where the next one is, and a change
// of key where a sample starts) meets exactly the file's true boundaries,
// because the file's own parse from that point is that walk. So a probed
// cut is true iff the walk from the start meets it, and false iff the walk
// steps over it. The prover below walks each file's chain forward from the
// last boundary it proved, reading only headers (formats.Chainer), and
// settles every probed cut it passes; a block is served only once its start
// (and, for tar, its end) is proven. When block j was loaded and tiled from
// a start proven true, a TFRecord walk jumps over it: its frames from a
// true start are the file's frames, so its end is true too (TilingProvesEnd).
//
// A block with a cut proven false fails with EIO and is never served; the
// file is recorded (MarkProbeWrong) so that the next index of the source
// scans it whole, and the sidecar is marked stale so that it is rebuilt.
//
// The cost: the walk reads every header once per mount and file, in the
// order blocks are first loaded; where records are small that is every
// byte of the file, read sequentially in 256 KiB windows, where they are
// large a 4 KiB read a record. The mount itself stays a probe (seconds),
// the first epoch pays for the walk, later epochs find every cut proven.
// Files scanned whole (a CSV probe in doubt, a file in the MarkProbeWrong
// list) have their record counts and need no walk; line formats and CSV
// need none at all (formats.Chainer says why).

// Cut states of a prover.
const (
	cutUnknown uint32 = iota
	cutTrue
	cutFalse
)

// maxWalks bounds the chain walks at once (more for a remote source,
// whose reads wait for the network), so that their read windows (at most
// 2 MiB each, formats.chainWindowMax) stay a small constant beside the
// memory budget: 8 or 16 MiB.
const (
	maxWalks       = 4
	maxRemoteWalks = 8
)

// prover settles the probed cuts of an index's files by their record
// chains (see the comment above).
type prover struct {
	ix      *index.Index
	chain   formats.Chainer
	learned []atomic.Int32 // the loader's: a block's count once it tiled
	log     *slog.Logger
	walks   chan struct{}
	files   []fileProof
	proofs  *index.ProofLog // nil: none kept
	// reads and bytes count what the walks read (Stats).
	reads, bytes atomic.Int64
	// wrong is called once per file whose probe was proved wrong.
	wrong func(file int32, reason string)
	// ahead is set for a remote source: a walk over a gap of records
	// smaller than a walk's window reads the gap's blocks whole, several
	// at once, and checks each one's chain (chain_ahead.go).
	ahead *aheadReads
	// kept is called for each file once it is in the ProofLog, so that
	// its learned record counts are kept too (Loader.keepCounts).
	kept func(file int32)
}

// fileProof is the walk of one file: cuts j of its blocks' starts (block
// first+j) and, as cut n, the end of its last block.
type fileProof struct {
	first, n int32
	state    []atomic.Uint32
	once     sync.Once // wrong reported
	logged   bool      // in the ProofLog (under mu)
	// proved is logged, for readers without mu (Loader.keepCounts).
	proved atomic.Bool

	mu     sync.Mutex
	at     int64 // a true boundary the walk reached
	next   int32 // the cuts before it are settled
	broken error // the chain is broken there (a *formats.CorruptError)
	// chained[j] is set once block j's bytes were read whole and the
	// record chain from cut j was seen to land exactly on cut j+1
	// (chain_ahead.go): were cut j true, so would cut j+1 be.
	chained []bool
}

// newProver returns the prover of ix, or nil when none is needed: not a
// probed index, a format whose probe is exact, or every file scanned whole.
func newProver(ix *index.Index, learned []atomic.Int32, log *slog.Logger, proofs *index.ProofLog, wrong func(int32, string)) *prover {
	ch, ok := ix.Fmt().(formats.Chainer)
	if !ix.Probed || !ok {
		return nil
	}
	walks := maxWalks
	if !index.IsLocal(ix.Source()) {
		walks = maxRemoteWalks
	}
	p := &prover{ix: ix, chain: ch, learned: learned, log: log, walks: make(chan struct{}, walks),
		files: make([]fileProof, len(ix.Files)), wrong: wrong, proofs: proofs}
	if !index.IsLocal(ix.Source()) {
		p.ahead = newAheadReads()
	}
	for i := range p.files {
		p.files[i].first = -1
	}
	need := false
	for id, b := range ix.Blocks {
		fp := &p.files[b.File]
		if fp.first < 0 {
			fp.first = int32(id)
		}
		fp.n++
		if b.Records == 0 {
			need = true
		}
	}
	if !need {
		return nil
	}
	for i := range p.files {
		fp := &p.files[i]
		fp.state = make([]atomic.Uint32, fp.n+1)
		fp.at = ix.Files[i].Head.Start
		if fp.first >= 0 && (ix.Blocks[fp.first].Records != 0 || proofs != nil && proofs.Has(p.entry(int32(i)))) {
			// Scanned whole (its cuts are a full scan's), or proven by
			// an earlier mount.
			fp.logged = true
			fp.proved.Store(true)
			for j := range fp.state {
				fp.state[j].Store(cutTrue)
			}
			fp.next = fp.n + 1
		}
	}
	return p
}

// cut returns cut j of file fi.
func (p *prover) cut(fi int32, j int32) int64 {
	fp := &p.files[fi]
	if j < fp.n {
		return p.ix.Blocks[fp.first+j].Offset
	}
	b := p.ix.Blocks[fp.first+fp.n-1]
	return b.Offset + b.Len
}

// ready reports whether block id may be served without a walk.
func (p *prover) ready(id int32) bool {
	b := p.ix.Blocks[id]
	fp := &p.files[b.File]
	j := id - fp.first
	return fp.state[j].Load() == cutTrue && (p.chain.TilingProvesEnd() || fp.state[j+1].Load() == cutTrue)
}

// prove returns nil once the block id may be served: its start proven,
// and its end too where tiling does not prove it (or end is set: the
// block did not tile, and the question is whether its end is false). The
// error wraps EIO when a cut it needs is false or the walk cannot proceed.
func (p *prover) prove(id int32, end bool) error {
	b := p.ix.Blocks[id]
	fp := &p.files[b.File]
	j := id - fp.first
	need := []int32{j}
	if end || !p.chain.TilingProvesEnd() {
		need = append(need, j+1)
	}
	last := need[len(need)-1]
	if fp.state[last].Load() == cutUnknown {
		if err := p.walk(b.File, last); err != nil {
			return err
		}
	}
	for _, k := range need {
		if fp.state[k].Load() != cutTrue {
			return p.fail(b, k)
		}
	}
	return nil
}

// walkAll walks each file of blocks ids, all at once, to the last cut
// that prove needs of them. Errors are left to prove, which walks again.
func (p *prover) walkAll(ids []int32) {
	targets := map[int32]int32{}
	for _, id := range ids {
		b := p.ix.Blocks[id]
		last := id - p.files[b.File].first
		if !p.chain.TilingProvesEnd() {
			last++
		}
		if t, ok := targets[b.File]; !ok || last > t {
			targets[b.File] = last
		}
	}
	var wg sync.WaitGroup
	for fi, t := range targets {
		wg.Go(func() { p.walk(fi, t) })
	}
	wg.Wait()
}

// fail is the error for block b, whose cut k is false.
func (p *prover) fail(b index.Block, k int32) error {
	fp := &p.files[b.File]
	path := p.ix.Path(b.File)
	c := p.cut(b.File, k)
	reason := fmt.Sprintf("%s: the probe index cut a block at offset %d, but the file's record chain from its start steps over that offset: it lies inside a record (whose payload holds records of the same format, which fooled the probe)", path, c)
	if fp.broken != nil {
		reason = fmt.Sprintf("%s: the probe index cut a block at offset %d, but the file's record chain from its start is broken before it (%v), so no boundary past the damage can be proven", path, c, fp.broken)
	}
	fp.once.Do(func() {
		p.log.Error("probe index: a probed record boundary is not proven by the record chain; the blocks cut there fail with EIO, and the next index of the source scans this file whole", "file", path, "offset", c, "reason", reason)
		if p.wrong != nil {
			p.wrong(b.File, reason)
		}
	})
	return fmt.Errorf("%s; block [%d, %d) is not served: the next mount indexes this file in full (or run `corgifs index {index} full` on the source and mount with {index} full): %w", reason, b.Offset, b.Offset+b.Len, syscall.EIO)
}

// walk settles the cuts of file fi up to cut target.
func (p *prover) walk(fi int32, target int32) error {
	fp := &p.files[fi]
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.next > target {
		return nil
	}
	p.walks <- struct{}{}
	defer func() { <-p.walks }()
	f := p.ix.Files[fi]
	path := p.ix.Path(fi)
	var sf source.File // opened by the first read
	defer func() {
		if sf != nil {
			sf.Close()
		}
	}()
	reader := func() (countedReader, error) {
		if sf == nil {
			o, err := p.ix.Source().Open(f.Path, f.Version)
			if err != nil {
				return countedReader{}, fmt.Errorf("%s: proving the probed record boundaries: %w", path, errors.Join(err, syscall.EIO))
			}
			sf = o
		}
		return countedReader{sf, p}, nil
	}
	defer p.proven(fi)
	if p.ahead != nil && p.dense(fi) && p.gapAhead(fi, target, nil) {
		r, err := reader()
		if err != nil {
			return err
		}
		p.chainAhead(fi, target, r, false)
	}
	for fp.next <= target {
		j := fp.next
		c := p.cut(fi, j)
		if fp.at < c {
			r, err := reader()
			if err != nil {
				return err
			}
			at, err := p.chain.ChainFrom(r, f.Head, fp.at, c)
			var ce *formats.CorruptError
			if errors.As(err, &ce) {
				// The chain itself is broken: from here on nothing can
				// be proven (a full scan reports the damage).
				fp.broken = err // before the states, which fail reads it after
				for k := j; k <= fp.n; k++ {
					fp.state[k].Store(cutFalse)
				}
				fp.next = fp.n + 1
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: proving the probed record boundaries, walking the records from offset %d: %w", path, fp.at, errors.Join(err, syscall.EIO))
			}
			fp.at = max(fp.at, at) // before c only at the end of the records: c lies past them
		}
		fp.next++
		if fp.at != c {
			fp.state[j].Store(cutFalse)
			continue
		}
		fp.state[j].Store(cutTrue)
		if p.chain.TilingProvesEnd() && j < fp.n && p.learned != nil && p.learned[fp.first+j].Load() != 0 {
			// Block j tiled from this true start: its end is true.
			fp.at = p.cut(fi, j+1)
		} else if j < fp.n && fp.chained != nil && fp.chained[j] {
			// The chain from this true start was seen to land on the
			// next cut: so does the file's own.
			fp.at = p.cut(fi, j+1)
		}
	}
	return nil
}

// countedReader counts the reads of a walk.
type countedReader struct {
	r io.ReaderAt
	p *prover
}

func (c countedReader) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(b, off)
	c.p.reads.Add(1)
	c.p.bytes.Add(int64(n))
	return n, err
}

// proven adds file fi to the ProofLog once every cut a block of it needs
// is proven true (the last one, the end of the records, is certain for
// TFRecord). Called under fp.mu.
func (p *prover) proven(fi int32) {
	fp := &p.files[fi]
	last := fp.n
	if p.chain.TilingProvesEnd() {
		last--
	}
	if fp.logged || p.proofs == nil || fp.next <= last {
		return
	}
	for j := int32(0); j <= last; j++ {
		if fp.state[j].Load() != cutTrue {
			return
		}
	}
	fp.logged = true
	p.proofs.Add(p.entry(fi))
	fp.proved.Store(true)
	if p.kept != nil {
		p.kept(fi)
	}
}

// entry is the ProofLog entry of file fi: its identity and its cuts.
func (p *prover) entry(fi int32) index.ProofEntry { return p.ix.ProofEntry(fi) }
