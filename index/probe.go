package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/corgifs/corgifs/formats"
)

// Index modes (--index): full reads every byte of every file; probe reads
// a small window at each multiple of the block size and finds the record
// boundary there (formats.Prober). Both cut blocks by the rule of Cuts, so
// where a probe is right they give the same blocks. A full index also
// cuts by CapCuts (very many tiny records), which a probe can do only for
// records of one size; the loader refuses a probed block that a full index
// would have cut so (blockcache's tooManyLearned), so any block that both
// serve is the same.
const (
	IndexFull  = "full"
	IndexProbe = "probe"
)

// A probed index knows every block's byte range, so the bytes of an epoch
// and of every part are exact; it does not know the records:
//   - Frames and RecordCRCs are nil, so strategies that read records one
//     at a time or order them by feedback, and --equal-parts, need a full
//     index (shuffler refuses);
//   - a block's Records is 0 (unknown) unless the format's records all
//     have one length (formats.Sizer: fixed, npy), and Index.CountsUnknown
//     is set; the loader learns the counts as it loads blocks, and the
//     stream shuffles the records of a buffer by the count loaded;
//   - blocks carry no CRC: for formats without checksums of their own, a
//     block is checked by its structure and the file's version only.
//
// A probe can be fooled by a payload that embeds whole records: for the
// formats where it can (formats.Chainer), the loader serves a block only
// once its boundaries are proven by the file's record chain, and a false
// one fails with EIO and has the next index scan that file whole (see
// probe_proof.go for the argument).

// probeJob is one probe: the first record boundary at or after off in
// file fi, into cuts[fi][k].
type probeJob struct {
	fi  int32
	k   int
	off int64
}

// buildProbed fills the files' scans of ix by probing. It reads each
// file's head, then probes every multiple of the block size, many at once
// (a probe of a remote file waits for one small GET). progress is called
// with the bytes the probes done since its last call stand for.
//
// A file where a probe cannot be certain of the boundary
// (formats.ErrProbeAmbiguous: CSV whose quoting the window does not
// settle) is scanned whole instead, and whole says which: their scans are
// a full index's (record table, block CRCs), which stripScan makes fit a
// probed index.
func (ix *Index) buildProbed(ctx context.Context, o Options, progress func(int64)) (scans []fileScan, whole []bool, err error) {
	files := ix.Files
	scans = make([]fileScan, len(files))
	whole = make([]bool, len(files))
	heads := make([]formats.Head, len(files))
	prober := o.Format.(formats.Prober) // Build checked
	workers := max(8, runtime.GOMAXPROCS(0))
	if !IsLocal(ix.src) {
		workers = 32
	}
	var failed atomic.Bool
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		failed.Store(true)
	}
	// Heads first: the probes need them.
	run(len(files), workers, &failed, func(i int) {
		if err := ctx.Err(); err != nil {
			fail(err)
			return
		}
		r, done, err := ix.openProbe(int32(i), o)
		if err != nil {
			fail(err)
			return
		}
		defer done()
		h, err := o.Format.Head(r, files[i].Size)
		if err != nil {
			fail(fmt.Errorf("index: %s: %w", ix.Path(int32(i)), err))
			return
		}
		heads[i] = h
	})
	if failed.Load() {
		return nil, nil, firstErr
	}
	// The edges: the records' start and end, and a probe at every multiple
	// of the block size between them.
	var jobs []probeJob
	cuts := make([][]int64, len(files))
	for i := range files {
		h := heads[i]
		n := 2
		if h.End > h.Start {
			n += int((h.End-1)/ix.BlockSize - h.Start/ix.BlockSize)
		}
		cuts[i] = make([]int64, n)
		jobs = append(jobs, probeJob{int32(i), 0, h.Start}, probeJob{int32(i), n - 1, h.End})
		for k := 1; k < n-1; k++ {
			jobs = append(jobs, probeJob{int32(i), k, (h.Start/ix.BlockSize + int64(k)) * ix.BlockSize})
		}
	}
	var probed atomic.Int64
	// Reads that follow the block size: a few percent of the bytes a
	// probe stands for, never more than a block (formats.WindowFor).
	window := formats.WindowFor(ix.BlockSize)
	window.Typical = new(atomic.Int64)
	ambiguous := make([]atomic.Bool, len(files))
	wrong := 0
	for i, w := range ix.scanWhole(o) {
		if w {
			// A load proved this file's probe wrong (probe_proof.go).
			ambiguous[i].Store(true)
			wrong++
			o.Logger.Info("probe index: a load proved the probe of this file wrong (a payload embeds records of its format); scanning it whole", "file", ix.Path(int32(i)))
		}
	}
	run(len(jobs), workers, &failed, func(j int) {
		if err := ctx.Err(); err != nil {
			fail(err)
			return
		}
		jb := jobs[j]
		if ambiguous[jb.fi].Load() {
			return // scanned whole
		}
		r, done, err := ix.openProbe(jb.fi, o)
		if err != nil {
			fail(err)
			return
		}
		defer done()
		var c int64
		if wp, ok := prober.(formats.WindowProber); ok {
			c, err = wp.ProbeWithin(r, heads[jb.fi], jb.off, window)
		} else {
			c, err = prober.Probe(r, heads[jb.fi], jb.off)
		}
		if errors.Is(err, formats.ErrProbeAmbiguous) {
			if !ambiguous[jb.fi].Swap(true) {
				o.Logger.Debug("probe index: scanning the whole file, its record boundary is not certain near a block edge", "file", ix.Path(jb.fi), "offset", jb.off, "why", err)
			}
			return
		}
		if err != nil {
			fail(fmt.Errorf("index: %s: probe at offset %d: %w", ix.Path(jb.fi), jb.off, err))
			return
		}
		if h := heads[jb.fi]; c < h.Start || c > h.End {
			fail(fmt.Errorf("index: %s: the probe at offset %d found a record boundary at %d, outside the file's records [%d, %d]", ix.Path(jb.fi), jb.off, c, h.Start, h.End))
			return
		}
		cuts[jb.fi][jb.k] = c
		if probed.Add(1)%256 == 0 {
			progress(256 * ix.BlockSize) // what the probes stand for
		}
	})
	if failed.Load() {
		return nil, nil, firstErr
	}
	var sizer formats.Sizer
	if s, ok := o.Format.(formats.Sizer); ok {
		sizer = s
	}
	var only []int
	var wholeBytes int64
	for i := range files {
		if ambiguous[i].Load() {
			whole[i] = true
			only = append(only, i)
			wholeBytes += files[i].Size
			continue
		}
		scans[i] = probedScan(int32(i), heads[i], cuts[i], sizer)
	}
	if len(only) == 0 {
		return scans, whole, nil
	}
	if len(only) > wrong {
		o.Logger.Info("probe index: quoting left a record boundary uncertain in some files; scanning them whole", "files", len(only)-wrong, "bytes", wholeBytes)
	}
	var reported int64
	so := o
	so.Progress = func(done, _ int64) { // one call at a time, never fewer bytes than before
		progress(done - reported)
		reported = done
	}
	errs := make([]error, len(files))
	ix.scanAll(ctx, so, scans, errs, wholeBytes, only)
	for _, i := range only {
		if errs[i] != nil {
			return nil, nil, errs[i]
		}
	}
	return scans, whole, nil
}

// stripScan makes the full scan of a file fit a probed index, which keeps
// no record table and no block CRCs: its blocks keep their record counts.
func stripScan(sc *fileScan) {
	sc.frames, sc.crcs = nil, nil
	for i := range sc.blocks {
		sc.blocks[i].CRC = 0
	}
}

// probedScan cuts file fi at the probed boundaries: cuts[0] is where its
// records start, cuts[len-1] where they end, and the ones between the
// first boundaries at or after the multiples of the block size.
func probedScan(fi int32, h formats.Head, cuts []int64, sizer formats.Sizer) fileScan {
	sc := fileScan{head: h, from: h.Start, to: h.Start}
	from, to := cuts[0], cuts[len(cuts)-1]
	if from >= to {
		return sc
	}
	sc.from, sc.to = from, to
	var size int64
	if sizer != nil {
		size = sizer.RecordLen(h)
	}
	prev := from
	add := func(end int64) {
		// Records of one size are cut by CapCuts as a full scan cuts
		// them: the boundaries are known without reading.
		for size > 0 && (end-prev)/size > MaxBlockRecords && CapCuts(MaxBlockRecords, MaxBlockRecords*size) {
			sc.blocks = append(sc.blocks, Block{File: fi, Offset: prev, Len: MaxBlockRecords * size, Records: MaxBlockRecords})
			sc.records += MaxBlockRecords
			prev += MaxBlockRecords * size
		}
		b := Block{File: fi, Offset: prev, Len: end - prev}
		if size > 0 {
			b.Records = int32((end - prev) / size)
			sc.records += int64(b.Records)
		}
		sc.blocks = append(sc.blocks, b)
		prev = end
	}
	for _, c := range cuts[1 : len(cuts)-1] {
		if c > prev && c < to {
			add(c)
		}
	}
	add(to)
	return sc
}

// openProbe opens file fi for probes: through the page cache, since a
// probe reads a few small windows.
func (ix *Index) openProbe(fi int32, o Options) (io.ReaderAt, func(), error) {
	f := ix.Files[fi]
	path := ix.Path(fi)
	if strings.HasSuffix(path, ".gz") || strings.HasSuffix(path, ".zz") {
		return nil, nil, fmt.Errorf("index: %s: %w", path, formats.ErrCompressed)
	}
	sf, err := ix.Source().Open(f.Path, f.Version)
	if err != nil {
		return nil, nil, fmt.Errorf("index: %s: %w", path, err)
	}
	return sf, func() { sf.Close() }, nil
}

// run calls fn(0) to fn(n-1) on up to workers goroutines, stopping early
// once failed is set.
func run(n, workers int, failed *atomic.Bool, fn func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && !failed.Load(); i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// countsKnown reports whether every block of the scans has its record count.
func countsKnown(scans []fileScan) bool {
	return !slices.ContainsFunc(scans, func(sc fileScan) bool {
		return slices.ContainsFunc(sc.blocks, func(b Block) bool { return b.Records == 0 })
	})
}

// reprobe returns the index of the source as it is now, from the probed
// index ix of it as it was: the files that kept their size, modification
// time and version keep their blocks, and only new and changed files are
// probed (each named in the log).
func (ix *Index) reprobe(ctx context.Context, o Options) (*Index, error) {
	o.fill()
	o.FollowSymlinks = ix.FollowSymlinks
	files, f, err := selectFiles(ctx, ix.src, o)
	if err != nil {
		return nil, err
	}
	if f.Name() != ix.Fmt().Name() {
		return nil, fmt.Errorf("the files are now %s, not %s", f.Name(), ix.Fmt().Name())
	}
	o.Format = f
	type kept struct {
		file   int32
		blocks []Block
	}
	old := make(map[string]*kept, len(ix.Files))
	for i, fl := range ix.Files {
		old[fl.Path] = &kept{file: int32(i)}
	}
	for _, b := range ix.Blocks {
		k := old[ix.Files[b.File].Path]
		k.blocks = append(k.blocks, b)
	}
	sub := &Index{Root: ix.Root, src: ix.src, BlockSize: ix.BlockSize, FollowSymlinks: ix.FollowSymlinks,
		Format: ix.Format, FormatOptions: ix.FormatOptions, format: f, Probed: true}
	var changed []int // indexes in files of those probed again
	for i, fl := range files {
		k, ok := old[fl.Path]
		if ok {
			was := ix.Files[k.file]
			if was.Size == fl.Size && was.Mtime == fl.Mtime && was.Version == fl.Version {
				continue
			}
			o.Logger.Info("source file changed since it was indexed; probing it again, alone", "file", ix.Root+"/"+fl.Path, "version", fl.Version, "was", was.Version)
		} else {
			o.Logger.Info("new source file; probing it", "file", ix.Root+"/"+fl.Path)
		}
		changed = append(changed, i)
		sub.Files = append(sub.Files, fl)
	}
	var total int64
	for _, fl := range files {
		total += fl.Size
	}
	probed, whole, err := sub.buildProbed(ctx, o, func(int64) {})
	if err != nil {
		return nil, err
	}
	for j := range probed {
		if whole[j] {
			stripScan(&probed[j])
		}
	}
	nix := &Index{Root: ix.Root, src: ix.src, BlockSize: ix.BlockSize, Files: files, FollowSymlinks: ix.FollowSymlinks,
		Format: ix.Format, FormatOptions: ix.FormatOptions, format: f, Probed: true}
	scans := make([]fileScan, len(files))
	for i, fl := range files {
		k := old[fl.Path]
		if k == nil {
			continue
		}
		was := ix.Files[k.file]
		sc := fileScan{records: was.Records, head: was.Head, from: was.From, to: was.To}
		for _, b := range k.blocks {
			b.File = int32(i)
			sc.blocks = append(sc.blocks, b)
		}
		scans[i] = sc
	}
	for j, i := range changed {
		sc := probed[j]
		for b := range sc.blocks {
			sc.blocks[b].File = int32(i)
		}
		scans[i] = sc
	}
	nix.CountsUnknown = !countsKnown(scans)
	return nix.assemble(f, scans, make([]error, len(files)), total, o)
}
