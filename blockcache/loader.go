// Package blockcache turns the block ids of an index (package index) into
// bytes with large reads, a shared memory budget and prefetch (the
// loader), and proves a probed index's boundaries before a block is
// served. It reads through the disk cache, if given one, by its
// interface diskcache.Tier.
package blockcache

import (
	"cmp"
	"errors"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corgifs/corgifs/diskcache"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
)

// LoaderOptions configure a Loader.
type LoaderOptions struct {
	MaxMemory int64 // budget for all slabs, shared by every stream
	InFlight  int   // block reads in flight at once (default 32); a load of blocks that can only be read through the page cache uses 4
	Logger    *slog.Logger
	// DiskCache, if set, keeps the blocks read from the source on local
	// disk and serves them from there (see diskcache.Open).
	DiskCache diskcache.Tier
	// Buffered reads everything through the page cache. By default, with
	// blocks of at least MinDirectBlock, the parts of blocks that are not
	// cached are read with O_DIRECT.
	Buffered bool
	// OnDamage, if set, is called once, the first time a loaded block no
	// longer matches the index although its file kept its size and
	// modification time (damaged in place): the check of a cached index
	// cannot see that, so the CLI marks the sidecar stale with it.
	OnDamage func(reason string)
	// OnProbeWrong, if set, is called once for each file of a probed
	// index whose probed boundaries its record chain disproves (see
	// probe_proof.go): the CLI records it with MarkProbeWrong, so that the
	// next index scans that file whole. Without it, OnDamage is called.
	OnProbeWrong func(file index.File, reason string)
	// Proofs, if set, keeps the files whose probed boundaries were proven
	// across mounts, so that a remount does not walk them again, and the
	// record counts learned of every block of a file, so that a remount's
	// index knows them (index.FillCounts).
	Proofs *index.ProofLog
	// MaxOpenFiles bounds the source descriptors open at once; by default
	// a quarter of the open-file limit, at most 1024.
	MaxOpenFiles int
	// Prefetch is how many buffers a stream loads ahead of the one it
	// serves: 0 means DefaultPrefetch, NoPrefetch none. Prefetches never
	// wait for memory, so a deep one only uses what is free.
	Prefetch int
	// PrefetchBytes bounds the bytes of the buffers loaded ahead beyond
	// the first (see DefaultPrefetchBytes); 0 means the default.
	PrefetchBytes int64
	// RunBytes is the most bytes of blocks adjacent in one file that one
	// request reads from a store that bills requests (a
	// source.RunRequester: runs.go): 0 means DefaultRunBytes; negative,
	// a request for each block.
	RunBytes int64
}

// Loader turns lists of block ids into loaded Bufs. All memory it hands out
// comes from one budget; when the budget is spent, idle Bufs are evicted
// (least recently used first, but not one another reader is being served
// from, see Serve) and, failing that, Get waits for a Release or a Pass.
// Prefetch never waits: it is skipped when memory is short. Source files
// are opened from a pool of bounded size (see filePool).
type Loader struct {
	ix       *index.Index
	src      source.Source // ix.Source()
	log      *slog.Logger
	seed     maphash.Seed
	start    time.Time // of Loader.clock
	prefetch int       // buffers a stream loads ahead (PrefetchDepth)
	ahead    int64     // PrefetchBytes
	damage   damage
	fetch    fetcher  // the reads from the source (fetch.go)
	tier     diskTier // the disk cache, and the bytes counted per epoch (loader_disk.go)
	count    counters // stats.go
	learn    learning // a probed index's record counts (split.go)
	// proof proves the probed boundaries of formats whose probe an
	// embedded record can fool before a block is served (probe_proof.go).
	proof *prover
	// proofs keeps the proofs and the learned counts for the next mount
	// (LoaderOptions.Proofs).
	proofs *index.ProofLog

	// mu guards mem, bufs, idle and the Bufs' reference counts; the
	// methods named …Locked must be called with it held.
	mu   sync.Mutex
	mem  memory // the budget and the slabs (budget.go)
	bufs map[uint64][]*Buf
	// Bufs with refs == 0, least recently used at the front.
	idle idleList[Buf]
	walk walked // blocks a chain walk read whole, kept (walked.go)
}

// damage reports, once, a block that no longer matches the index.
type damage struct {
	report func(string) // LoaderOptions.OnDamage
	once   sync.Once
}

// NewLoader returns a Loader for the blocks of ix.
func NewLoader(ix *index.Index, o LoaderOptions) *Loader {
	if o.InFlight <= 0 {
		o.InFlight = 32
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxOpenFiles <= 0 {
		o.MaxOpenFiles = poolSize()
	}
	var learned, files []atomic.Int32
	if ix.CountsUnknown {
		learned = make([]atomic.Int32, len(ix.Blocks))
		files = make([]atomic.Int32, len(ix.Files))
	}
	l := &Loader{
		ix: ix, src: ix.Source(), log: o.Logger, seed: maphash.MakeSeed(), start: time.Now(), prefetch: prefetchDepth(o.Prefetch), ahead: cmp.Or(o.PrefetchBytes, DefaultPrefetchBytes),
		damage: damage{report: o.OnDamage},
		fetch: fetcher{
			direct:   readsDirect(ix, o),
			sem:      make(chan struct{}, o.InFlight),
			files:    newFilePool(o.MaxOpenFiles),
			runBytes: max(0, cmp.Or(o.RunBytes, DefaultRunBytes)),
		},
		tier:   diskTier{disk: o.DiskCache},
		learn:  learning{counts: learned, files: files},
		proofs: o.Proofs,
		mem:    memory{budget: o.MaxMemory, changed: make(chan struct{})},
		bufs:   make(map[uint64][]*Buf),
		idle:   newIdleList(func(b *Buf) *links[Buf] { return &b.links }),
	}
	l.proof = newProver(ix, learned, o.Logger, o.Proofs, func(fi int32, reason string) {
		if o.OnProbeWrong != nil {
			o.OnProbeWrong(ix.Files[fi], reason)
		} else {
			l.damaged(errors.New(reason))
		}
	})
	if l.proof != nil {
		l.proof.kept = l.keepCounts
		if l.proof.ahead != nil {
			l.proof.ahead.keep = l
		}
	}
	return l
}

// damaged reports a block that no longer matches the index to OnDamage.
func (l *Loader) damaged(err error) {
	if l.damage.report != nil {
		l.damage.once.Do(func() { l.damage.report(err.Error()) })
	}
}
