package index

// A probed index reused at a larger block size (issue 25): a first mount
// after `corgifs index --block-size X` at another block size used to probe
// every object again, thousands of GETs at a store.
//
// A probe at offset k·b returns the first confirmed record boundary at or
// after it (formats.Prober), a property of the position alone. For a
// block size B that is a multiple m of b, the probe at j·B is the probe
// at (j·m)·b, which the index at b already made: its block starting there
// is the first of its blocks starting at or after j·B. So the index at B
// is the index at b with the blocks between those cuts merged, and needs
// no read. (Were a probe not positional, the cuts taken would still be
// record boundaries, which the loader checks and, for TFRecord and tar,
// proves by the record chain: never wrong bytes, only other block sizes.)
//
// A smaller block size, or one that is not a multiple, needs probes at
// offsets the index never probed: the source is probed again.

import (
	"fmt"
	"log/slog"

	"github.com/corgifs/corgifs/internal/cachedir"
	"github.com/dustin/go-humanize"
)

// minRebaseBlock is the smallest block size whose sidecar is looked for.
const minRebaseBlock = 4 << 10

// rebased returns the probed index of the sidecar at the largest block
// size that divides h.BlockSize by a power of two, cut at h.BlockSize,
// or nil when there is none.
func rebased(dir *cachedir.Dir, h sidecarHeader, log *slog.Logger) *Index {
	if !h.Probe {
		return nil
	}
	for b := h.BlockSize / 2; b >= minRebaseBlock && h.BlockSize%b == 0; b /= 2 {
		at := h
		at.BlockSize = b
		old, _ := loadSidecar(dir, at.name(), at)
		if old == nil || !old.Probed || len(old.Damaged) > 0 {
			continue
		}
		ix, err := old.rebase(h.BlockSize)
		if err != nil {
			log.Debug("could not reuse the probed index of another block size", "block_size", b, "err", err)
			continue
		}
		log.Info("index: reusing the probed index built at another block size, its blocks merged, without probing again",
			"built_at", humanize.IBytes(uint64(b)), "block_size", humanize.IBytes(uint64(h.BlockSize)), "blocks", len(ix.Blocks), "was", len(old.Blocks))
		return ix
	}
	return nil
}

// rebase returns ix cut at block size bs, a multiple of ix.BlockSize:
// block j of a file starts at the first of ix's block starts at or after
// j·bs (see above). ix is probed and has no damaged ranges.
func (ix *Index) rebase(bs int64) (*Index, error) {
	if bs <= 0 || ix.BlockSize <= 0 || bs%ix.BlockSize != 0 {
		return nil, fmt.Errorf("block size %d is not a multiple of %d", bs, ix.BlockSize)
	}
	nix := &Index{Root: ix.Root, BlockSize: bs, FollowSymlinks: ix.FollowSymlinks, Files: make([]File, len(ix.Files)),
		Format: ix.Format, FormatOptions: ix.FormatOptions, Head: ix.Head, format: ix.format, src: ix.src, Probed: true,
		CountsUnknown: ix.CountsUnknown, Bytes: ix.Bytes, RecordMin: ix.RecordMin, RecordMedian: ix.RecordMedian, RecordMax: ix.RecordMax}
	copy(nix.Files, ix.Files)
	for i := range nix.Files {
		nix.Files[i].Records = 0
	}
	unknown := false // a merged block's count is known only if all its blocks' are
	for i, b := range ix.Blocks {
		last := len(nix.Blocks) - 1
		if i > 0 && ix.Blocks[i-1].File == b.File && b.Offset/bs == ix.Blocks[i-1].Offset/bs {
			// No multiple of bs in (the previous start, this start]:
			// this block joins the previous one.
			m := &nix.Blocks[last]
			if m.Offset+m.Len != b.Offset {
				return nil, fmt.Errorf("%s: block at offset %d does not follow the block ending at %d", ix.Path(b.File), b.Offset, m.Offset+m.Len)
			}
			m.Len += b.Len
			if b.Records == 0 || m.Records == 0 {
				unknown = true
				m.Records = 0
			} else {
				m.Records += b.Records
			}
			continue
		}
		nix.Blocks = append(nix.Blocks, Block{File: b.File, Records: b.Records, Offset: b.Offset, Len: b.Len})
	}
	for _, b := range nix.Blocks {
		nix.Files[b.File].Records += int64(b.Records)
		nix.Records += int64(b.Records)
	}
	nix.CountsUnknown = nix.CountsUnknown || unknown
	if err := nix.checkTiling(); err != nil {
		return nil, err
	}
	return nix, nil
}
