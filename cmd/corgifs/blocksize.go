package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"strconv"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/dustin/go-humanize"
)

// Defaults that cannot silently degrade the shuffle. CorgiPile mixes the
// records of the blocks in one buffer: a buffer of one or two blocks serves
// each block nearly unmixed (a block-only shuffle), and a part of one
// buffer samples few blocks. So a block is at most 1/16 of the buffer and
// 1/32 of a part (two buffers of 16 blocks). Without --block-size, the
// block size is lowered (to a power of two, at least minAutoBlock) until
// it is; with --block-size, a warning says what to change.
const (
	minBlocksPerBuffer = 16
	minBuffersPerPart  = 2
	minAutoBlock       = 4 << 10 // a page: smaller reads cost more than they save
)

// fitBlockSize returns the largest block size that keeps minBlocksPerBuffer
// blocks in a buffer of target bytes and minBuffersPerPart such buffers in
// a part of partBytes.
func fitBlockSize(partBytes, target int64) int64 {
	return min(target, partBytes/minBuffersPerPart) / minBlocksPerBuffer
}

// floorPow2 returns the largest power of two not above n (n > 0).
func floorPow2(n int64) int64 { return 1 << (63 - bits.LeadingZeros64(uint64(n))) }

// fitBlocks applies the block size rule to the index and planner that open
// made, for parts parts of an epoch. Without --block-size it returns them
// remade with a lower block size when the rule asks for one (the same seed,
// so that mount and order agree); with --block-size it warns, naming the
// numbers and the flag. Either way it warns when parts exceed the blocks.
func (d *datasetFlags) fitBlocks(ctx context.Context, src string, ix *blockcache.Index, pl *shuffler.Planner, seed uint64, parts int, log *slog.Logger, stderr io.Writer) (*blockcache.Index, *shuffler.Planner, error) {
	if ix.Bytes > 0 && parts > 0 && !shuffler.ReadsRecords(d.strategy) {
		part := ix.Bytes / int64(parts)
		target, _ := pl.BufferTarget(part)
		fit := fitBlockSize(part, target)
		if ix.BlockSize > fit && !d.blockSizeGiven {
			if lowered := max(minAutoBlock, floorPow2(max(1, fit))); lowered < ix.BlockSize {
				log.Info("block size lowered so that a buffer holds at least 16 blocks and a part at least 2 buffers (give --block-size to choose it)",
					"block_size", humanize.IBytes(uint64(lowered)), "from", humanize.IBytes(uint64(ix.BlockSize)),
					"buffer", humanize.IBytes(uint64(target)), "part", humanize.IBytes(uint64(part)), "parts", parts)
				d.blockSizeFrom = ix.BlockSize
				d.blockSize = sizeFlag(lowered)
				d.seed = strconv.FormatUint(seed, 10)
				var err error
				if ix, pl, _, err = d.open(ctx, src, log, stderr); err != nil {
					return nil, nil, err
				}
			}
		}
		if ix.BlockSize > fit {
			d.warnBlockSize(ix.BlockSize, fit, target, part, parts, log)
		}
	}
	d.warnParts(ix, pl, parts, log)
	return ix, pl, nil
}

// warnBlockSize says that blocks of blockSize are too large for buffers
// of target bytes in parts of part bytes, and what to change.
func (d *datasetFlags) warnBlockSize(blockSize, fit, target, part int64, parts int, log *slog.Logger) {
	var hint string
	switch {
	case d.blockSizeGiven && fit >= minAutoBlock:
		hint = fmt.Sprintf("use --block-size %s or less (or leave --block-size out to have it chosen), or a larger --buffer",
			humanize.IBytes(uint64(floorPow2(fit))))
	case d.blockSizeGiven:
		hint = fmt.Sprintf("use --block-size %s (smaller reads cost more than they save) with a larger --buffer (at least %s) or fewer --parts",
			humanize.IBytes(minAutoBlock), humanize.IBytes(uint64(minBlocksPerBuffer*minAutoBlock)))
	default:
		// Lowered as far as is useful: only the buffer or K can change.
		hint = fmt.Sprintf("the dataset is small for this --buffer and --parts: use a larger --buffer (at least %s) or fewer --parts",
			humanize.IBytes(uint64(minBlocksPerBuffer*blockSize)))
	}
	log.Warn("block size too large for a good shuffle: a buffer should hold at least 16 blocks and a part at least 2 buffers, or records stay nearly in block order; "+hint,
		"block_size", humanize.IBytes(uint64(blockSize)), "blocks_per_buffer", target/blockSize,
		"buffers_per_part", part/max(1, target), "buffer", humanize.IBytes(uint64(target)),
		"part", humanize.IBytes(uint64(part)), "parts", parts)
}

// warnParts warns when an epoch has more parts than blocks: some parts
// are then empty, and --equal-parts fills every part to the largest one.
// (A dataset of no records is said by the index.)
func (d *datasetFlags) warnParts(ix *blockcache.Index, pl *shuffler.Planner, parts int, log *slog.Logger) {
	if shuffler.ReadsRecords(d.strategy) || parts <= len(ix.Blocks) || len(ix.Blocks) == 0 {
		return
	}
	if !d.equalParts {
		log.Warn("--parts is larger than the number of blocks: some parts of every epoch are empty; use fewer --parts or a smaller --block-size",
			"parts", parts, "blocks", len(ix.Blocks), "block_size", humanize.IBytes(uint64(ix.BlockSize)))
		return
	}
	p, err := pl.Plan(0, 0, parts)
	if err != nil {
		return
	}
	epoch := p.Records * int64(parts)
	log.Warn("--parts is larger than the number of blocks: with --equal-parts every part holds as many records as the largest, borrowing the next parts' records, so an epoch serves more records than the dataset holds; use fewer --parts or a smaller --block-size",
		"parts", parts, "blocks", len(ix.Blocks), "block_size", humanize.IBytes(uint64(ix.BlockSize)),
		"records_per_part", p.Records, "epoch_records", epoch, "dataset_records", ix.Records,
		"times_the_dataset", strconv.FormatFloat(float64(epoch)/float64(max(1, ix.Records)), 'f', 2, 64))
}
