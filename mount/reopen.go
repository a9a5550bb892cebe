package mount

import (
	"log/slog"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
)

// Reopen returns the Dataset of c over d's source and index, as Open
// would make it (the memory split, the feedback store of a feedback
// strategy, the planner) without opening the source or reading the index
// again: for a caller that reads several orders of one index in-process
// (validate). c is checked as Open checks it; its source, format and
// block size must be those d was indexed with. The buffer c leaves zero
// is chosen by package sizing for c's strategy from the bytes d's listing
// found, as a mount of c would choose it. The new Dataset logs to log
// (nil: d's logger) what a mount of c logs as it opens and serves, its
// warnings included: too few blocks a buffer for c's strategy, damaged
// bytes left out. Close the result when done; d stays open.
func (d *Dataset) Reopen(c Config, log *slog.Logger) (*Dataset, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = d.log
	}
	ix := d.Index
	n := &Dataset{Config: c, Source: d.Source, Index: ix, Cached: d.Cached, log: log,
		blockSizeGiven: c.BlockSize != 0, bufferGiven: c.Buffer != (shuffler.BufferSize{})}
	n.Sizes = sizing.Choose(sizing.Input{DatasetBytes: d.Sizes.DatasetBytes, Parts: max(1, c.Parts), ObjectStore: d.Source != nil,
		MaxMemory: c.MaxMemory, RecordStrategy: shuffler.ReadsRecords(c.Strategy), BlockSize: c.BlockSize, Buffer: c.Buffer})
	n.Config.BlockSize, n.Config.Buffer = ix.BlockSize, n.Sizes.Buffer
	warnSizes(log, n.Sizes)
	n.warnIndex()
	if err := n.plan(); err != nil {
		return nil, err
	}
	return n, nil
}

// NewLoader makes a loader of d's blocks within its share of MaxMemory,
// as Serve does for a mount but without the disk cache: for a caller
// that reads d's parts in-process, through shuffler.NewStream.
func (d *Dataset) NewLoader() *blockcache.Loader {
	return blockcache.NewLoader(d.Index, d.Config.LoaderOptions(d.Source, d.SlabBudget, d.log))
}
