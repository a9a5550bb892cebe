package mount

import (
	"context"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/diskcache"
	"github.com/corgifs/corgifs/fs"
	"github.com/corgifs/corgifs/index"
	"github.com/dustin/go-humanize"
)

// Serve mounts the dataset at mountpoint: it sets the Go heap's soft
// limit, opens the disk cache, makes the loader and hands them to
// package fs. The server runs until it is unmounted; call Close after.
func (d *Dataset) Serve(ctx context.Context, mountpoint string) (*fs.Server, error) {
	c, ix, pl, log := &d.Config, d.Index, d.Planner, d.log
	gid, err := c.FeedbackGID()
	if err != nil {
		return nil, err
	}
	if d.Coordinator != nil {
		// The order server plans epoch e+1 as soon as its mount
		// accepts feedback of epoch e.
		d.Coordinator.PlanNext(func(epoch, parts int) {
			if _, err := pl.Plan(epoch, 0, parts); err != nil {
				log.Warn("could not plan the next epoch ahead", "epoch", epoch, "parts", parts, "err", err)
			}
		})
	}
	if target, capped := pl.BufferTarget(ix.Bytes / int64(c.Parts)); capped {
		log.Info("buffer lowered so that a part's double buffer fits in {max-memory}",
			"buffer", humanize.IBytes(uint64(target)), "max_memory", humanize.IBytes(uint64(c.MaxMemory)))
	}
	// Without a soft limit the heap could double between collections.
	debug.SetMemoryLimit(d.HeapLimit)
	lo := c.LoaderOptions(d.Source, d.SlabBudget, log)
	lo.OnDamage = func(reason string) {
		// A count kept by an earlier mount may be what was wrong.
		if err := d.proofs.ForgetCounts(); err != nil {
			log.Warn("could not forget the record counts kept by earlier mounts", "err", err)
		}
		if err := index.MarkStale(ix.Source(), c.IndexOptions(log), reason); err != nil {
			log.Warn("could not mark the index sidecar stale", "err", err)
			return
		}
		log.Warn("index sidecar marked stale: the next mount rebuilds the index")
	}
	lo.OnProbeWrong = func(file index.File, reason string) {
		if err := index.MarkProbeWrong(ix.Source(), c.IndexOptions(log), file, reason); err != nil {
			log.Warn("could not record the file whose probe was wrong; the next mount probes it again", "file", file.Path, "err", err)
			return
		}
		log.Warn("index sidecar marked stale: the next mount rebuilds the index, scanning this file whole", "file", file.Path)
	}
	if ix.Probed && d.proofs == nil {
		// Files proven by an earlier mount are not walked again (Open
		// opened the log, unless the Dataset was made otherwise).
		if d.proofs, err = index.OpenProofLog(ix.Source(), c.IndexOptions(log)); err != nil {
			log.Warn("could not read the record-chain proofs of earlier mounts; every probed file is walked again", "err", err)
		}
	}
	if d.proofs != nil {
		lo.Proofs = d.proofs
	}
	if d.diskCache, err = d.openDiskCache(); err != nil {
		return nil, err
	}
	if d.diskCache != nil {
		// Not a nil *diskcache.Cache in the interface: the loader would
		// take it for a disk cache.
		lo.DiskCache = d.diskCache
	}
	ld := blockcache.NewLoader(ix, lo)
	in := api.NewConfig(ix, pl, c.Epochs, c.Parts)
	// The planner holds the loader's share of it; config.json says what
	// was asked for, as the user wrote it.
	in.MaxMemory = c.MaxMemory
	in.Sizing = d.SizingInfo()
	in.Prefetch = ld.PrefetchDepth()
	// --include as given; absent when it is the format's own globs (what
	// a mount given none uses), as validate's child mounts pass them.
	if c.Include != nil && !slices.Equal(c.Include, ix.Fmt().Include()) {
		in.Include = c.Include
	}
	var stats func() any
	if d.Source != nil {
		stats = func() any { return d.Source.Stats() }
	}
	return fs.Mount(ctx, fs.Config{
		Mountpoint: mountpoint, Planner: pl, Loader: ld, Epochs: c.Epochs, Parts: c.Parts,
		Info: in, AllowOther: c.AllowOther, Logger: log, Feedback: d.Feedback, FeedbackGroup: gid,
		PanicOnLookup: c.PanicOnLookup,
		SourceStats:   stats,
	})
}

// openDiskCache opens the disk cache, or returns nil without
// Config.DiskCache. The copies of blocks waiting to be written take at
// most a quarter of the loader's budget, and at most 64 MiB, beyond
// MaxMemory.
func (d *Dataset) openDiskCache() (*diskcache.Cache, error) {
	c := &d.Config
	if c.DiskCache == "" {
		return nil, nil
	}
	return diskcache.Open(d.Index, diskcache.Options{
		Dir: c.DiskCache, MaxBytes: c.DiskCacheBytes, Percent: c.DiskCachePercent, NextUse: d.Planner.NextUse(), Logger: d.log,
		MaxQueued: min(diskcache.DefaultQueue, max(1, d.SlabBudget/4)),
	})
}

// CheckDiskCache refuses a disk cache inside the mount point: the daemon
// would read its cache through itself.
func (c *Config) CheckDiskCache(mountpoint string) error {
	if c.DiskCache == "" {
		return nil
	}
	m, err := RealPath(mountpoint)
	if err != nil {
		return err
	}
	dc, err := RealPath(c.DiskCache)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(m, dc); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return optionErrorf("disk-cache", "{disk-cache} %s is inside the mount point %s; choose a directory outside it", c.DiskCache, mountpoint)
	}
	return nil
}

// RealPath is p made absolute, its symbolic links resolved where it
// exists.
func RealPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r, nil
	}
	return abs, nil
}
