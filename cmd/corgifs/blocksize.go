package main

import (
	"log/slog"
	"strconv"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/dustin/go-humanize"
)

// warnParts warns when an epoch has more parts than blocks: some parts
// are then empty, and --equal-parts fills every part to the largest one.
// (A dataset of no records is said by the index.)
func (d *datasetFlags) warnParts(ix *index.Index, pl *shuffler.Planner, parts int, log *slog.Logger) {
	if shuffler.ReadsRecords(d.c.Strategy) || parts <= len(ix.Blocks) || len(ix.Blocks) == 0 {
		return
	}
	if !d.c.EqualParts {
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
