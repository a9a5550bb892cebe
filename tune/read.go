package tune

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/zaccess"
)

// DataOptions say how much of a dataset Data reads.
type DataOptions struct {
	// Format reads the records of a block (default TFRecord).
	Format formats.Format
	// MaxBytes bounds the bytes read: a larger dataset is analysed on a
	// random sample of its blocks (0: read every block).
	MaxBytes int64
	// Seed chooses the sample and the random order of the TV baseline.
	Seed uint64
	// Progress, if set, is called as bytes are read.
	Progress func(done, total int64)
	// Source, if set, is the remote source ix was built from (an S3
	// bucket): blocks are read from it, one ranged read each, pinned to
	// the versions in the index.
	Source source.Source
}

// Data reads the records of the blocks of ix (or of a sample of them) and
// reports how clustered their order is; see the package comment. Files
// that were not in the page cache are dropped from it once read.
func Data(ctx context.Context, ix *index.Index, dec Decoder, o DataOptions) (DataReport, error) {
	if o.Format == nil {
		o.Format = formats.TFRecord{}
	}
	blocks := sampleBlocks(ix, o.MaxBytes, o.Seed)
	var total int64
	for _, b := range blocks {
		total += ix.Blocks[b].Len
	}
	// A file that was mostly out of the page cache when opened is dropped
	// from it as it is read (up to the end of the block just read; the
	// kernel's readahead beyond is for the next block) and whole when
	// closed: the data pass leaves the cache as it found it, so that a
	// probe or a benchmark run next still meets a cold source.
	type open struct {
		f    io.ReaderAt
		c    io.Closer
		cold bool
	}
	files := map[int32]open{}
	defer func() {
		for _, f := range files {
			if f.cold {
				dropRange(f.f.(*os.File), 0, 0)
			}
			f.c.Close()
		}
	}()
	a := NewAnalysis()
	br := bufio.NewReaderSize(nil, 1<<20)
	var dc zaccess.Decoder
	defer dc.Close()
	var x []float32
	var done int64
	for _, b := range blocks {
		if err := ctx.Err(); err != nil {
			return DataReport{}, err
		}
		blk := ix.Blocks[b]
		of, ok := files[blk.File]
		if !ok {
			var err error
			of, err = func() (open, error) {
				if o.Source != nil {
					fi := ix.Files[blk.File]
					f, err := o.Source.Open(fi.Path, fi.Version)
					return open{f: f, c: f}, err
				}
				f, err := os.Open(ix.Path(blk.File))
				if err != nil {
					return open{}, err
				}
				return open{f, f, coldRange(f, 0, ix.Files[blk.File].Size)}, nil
			}()
			if err != nil {
				return DataReport{}, err
			}
			files[blk.File] = of
		}
		f := of.f
		var rd io.Reader = io.NewSectionReader(f, blk.Offset, blk.Len)
		if acc := ix.Files[blk.File].Access; acc != nil {
			// A compressed file: the block's offsets are in its
			// decompressed stream.
			r, err := dc.Open(acc, f, ix.Files[blk.File].Size, blk.Offset)
			if err != nil {
				return DataReport{}, fmt.Errorf("%s at decompressed offset %d: %w", ix.Path(blk.File), blk.Offset, err)
			}
			rd = io.LimitReader(r, blk.Len)
		}
		br.Reset(rd)
		rr := o.Format.NewReader(br)
		a.StartBlock()
		for off := blk.Offset; ; {
			rec, err := rr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return DataReport{}, fmt.Errorf("%s, record at offset %d: %w", ix.Path(blk.File), off, err)
			}
			label, feats, err := dec.Decode(rec, x[:0])
			if err != nil {
				return DataReport{}, fmt.Errorf("%s, record at offset %d: %w", ix.Path(blk.File), off, err)
			}
			x = feats
			if err := a.Record(label, feats); err != nil {
				return DataReport{}, fmt.Errorf("%s, record at offset %d: %w", ix.Path(blk.File), off, err)
			}
			off += int64(len(rec))
		}
		a.EndBlock()
		if of.cold {
			dropRange(f.(*os.File), 0, blk.Offset+blk.Len)
		}
		done += blk.Len
		if o.Progress != nil {
			o.Progress(done, total)
		}
	}
	rep, err := a.Report(o.Seed)
	if err != nil {
		return rep, fmt.Errorf("%s: %w", ix.Root, err)
	}
	rep.BlocksInAll = len(ix.Blocks)
	rep.Mix = a.Mix(len(ix.Blocks), o.Seed)
	return rep, nil
}

// sampleBlocks returns the blocks to read, in index order: all of them, or
// a seeded random sample of about maxBytes.
func sampleBlocks(ix *index.Index, maxBytes int64, seed uint64) []int {
	all := make([]int, len(ix.Blocks))
	for i := range all {
		all[i] = i
	}
	if maxBytes <= 0 || ix.Bytes <= maxBytes {
		return all
	}
	rng := rand.New(rand.NewPCG(seed, 0x73616d706c65))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	var n int64
	k := 0
	for k < len(all) && n < maxBytes {
		n += ix.Blocks[all[k]].Len
		k++
	}
	out := all[:k]
	slices.Sort(out)
	return out
}
