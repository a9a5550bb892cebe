package main

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
	"github.com/dustin/go-humanize"
)

// chooseSizes sets the block size and the buffer that were not given by
// package sizing's rule, from the bytes a listing of src finds, before
// anything is indexed: the index is built once, at the size it is served
// at. The rule's reason is logged and kept for config.json; its warning,
// when memory cannot hold enough blocks a buffer, is logged as one.
func (d *datasetFlags) chooseSizes(ctx context.Context, src string, recordStrategy bool, log *slog.Logger) sizing.Choice {
	o := d.indexOptions(log, nil)
	bytes, err := blockcache.SourceBytes(ctx, src, o)
	if err != nil {
		// Indexing says what is wrong with the source, as it always did.
		log.Debug("could not list the source to choose the block size", "err", err)
	}
	in := sizing.Input{DatasetBytes: bytes, Parts: max(1, d.parts), ObjectStore: d.source != nil,
		MaxMemory: int64(d.maxMemory), RecordStrategy: recordStrategy}
	if d.blockSizeGiven {
		in.BlockSize = int64(d.blockSize)
	}
	if d.bufferGiven {
		in.Buffer = d.buffer.v
	}
	c := sizing.Choose(in)
	d.blockSize, d.buffer.v, d.sizes = sizeFlag(c.BlockSize), c.Buffer, &c
	log.Info("block size and buffer", "block_size", humanize.IBytes(uint64(c.BlockSize)), "buffer", c.Buffer.String(),
		"source_bytes", humanize.IBytes(uint64(bytes)), "parts", in.Parts, "blocks_per_buffer", c.BlocksPerBuffer, "why", c.Reason)
	if c.Warning != "" {
		log.Warn("too few blocks per buffer for a good shuffle: "+c.Warning,
			"block_size", humanize.IBytes(uint64(c.BlockSize)), "blocks_per_buffer", c.BlocksPerBuffer,
			"buffer", humanize.IBytes(uint64(c.BufferBytes)), "expected_label_tv", strconv.FormatFloat(c.ExpectedTV, 'f', 3, 64))
	}
	return c
}

func (d *datasetFlags) sizesInfo() *api.Sizing {
	if d.sizes == nil {
		return nil
	}
	c := d.sizes
	return &api.Sizing{BlockSizeGiven: d.blockSizeGiven, BufferGiven: d.bufferGiven, BlocksPerBuffer: c.BlocksPerBuffer,
		WholePart: c.WholePart, ExpectedTV: c.ExpectedTV, Reason: c.Reason, Warning: c.Warning}
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
