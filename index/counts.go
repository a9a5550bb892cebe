package index

// The record counts of a probed index kept across mounts (issue 25).
//
// A probed index does not know how many records its blocks hold: the
// loader learns each count as it loads the block, and until every count of
// a buffer is known the buffer cannot be served while it loads (a record's
// place in the buffer depends on the counts of the blocks before it), so
// the first epoch of every mount waits for whole buffers. Once a loader
// has learned every block of a file, and for the formats whose probe an
// embedded record can fool (formats.Chainer) the record chain has proven
// the file's cuts, the counts are kept in the cache directory beside the
// ProofLog's proofs, and the next mount's probed index takes them
// (FillCounts): it then serves its buffers as they arrive, as a full
// index does.
//
// A count is a property of the bytes between two cuts read as one format,
// so an entry is keyed by the file's identity (path, size, modification
// time, version), the hash of its cuts (ProofEntry) and the format with its
// options; a file whose identity, cuts or format differ is not given it.
// The loader still checks every count it is given: a block that splits into
// another number of records fails with EIO, as with a full index, and the
// mount's OnDamage forgets every kept count (ForgetCounts), as does an Open
// that finds the sidecar marked stale.

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/cachedir"
	"github.com/corgifs/corgifs/source"
)

// countsEntry is the record count of every block of one file, in block
// order, as a loader learned them.
type countsEntry struct {
	ProofEntry
	// Format names the format and its options, which say what a record
	// is: the same bytes are other records to another format.
	Format string
	Counts []int32
}

// countsLogName is the name of the kept counts in the cache directory.
func countsLogName(src source.Source) string {
	sum := sha256.Sum256([]byte(src.ID()))
	return hex.EncodeToString(sum[:12]) + ".probe-counts"
}

// FileBlocks returns the first block of file fi and how many blocks it
// has: a file's blocks follow one another in Blocks.
func (ix *Index) FileBlocks(fi int32) (first, n int32) {
	ix.fileOnce.Do(func() {
		ix.fileStart = make([]int32, len(ix.Files)+1)
		b := 0
		for f := range ix.Files {
			ix.fileStart[f] = int32(b)
			for b < len(ix.Blocks) && ix.Blocks[b].File == int32(f) {
				b++
			}
		}
		ix.fileStart[len(ix.Files)] = int32(b)
	})
	return ix.fileStart[fi], ix.fileStart[fi+1] - ix.fileStart[fi]
}

// ProofEntry returns the ProofLog entry of file fi: its identity, and a
// hash of its cuts (its blocks' starts and the end of the last).
func (ix *Index) ProofEntry(fi int32) ProofEntry {
	f := ix.Files[fi]
	first, n := ix.FileBlocks(fi)
	h := sha256.New()
	var b [8]byte
	for _, blk := range ix.Blocks[first : first+n] {
		binary.LittleEndian.PutUint64(b[:], uint64(blk.Offset))
		h.Write(b[:])
	}
	if n > 0 {
		last := ix.Blocks[first+n-1]
		binary.LittleEndian.PutUint64(b[:], uint64(last.Offset+last.Len))
		h.Write(b[:])
	}
	return ProofEntry{Path: f.Path, Size: f.Size, Mtime: f.Mtime, Version: f.Version, Cuts: hex.EncodeToString(h.Sum(nil)[:16])}
}

// countsFormat is the Format of ix's counts entries.
func countsFormat(ix *Index) string {
	return fmt.Sprintf("%s %+v", ix.Fmt().Name(), ix.FormatOptions)
}

// CountsKept returns how many files' record counts were known from an
// earlier mount (FillCounts).
func (ix *Index) CountsKept() int { return ix.countsKept }

// KeptRecords returns the records of the files whose counts FillCounts
// filled: Records less them is what the probe itself knew, which the
// policies that shape a plan (mount.MemorySplit) must use, so that the
// plan is the one of the mount that learned the counts.
func (ix *Index) KeptRecords() int64 { return ix.keptRecords }

// readCounts reads the kept counts of pl's source from dir; a damaged
// list is ignored (rewritten whole at the next flush).
func (pl *ProofLog) readCounts(dir *cachedir.Dir) {
	name := countsLogName(pl.src)
	if !dir.Exists(name) {
		return
	}
	b, err := dir.ReadFile(name, maxProofLog)
	var list []countsEntry
	if err != nil || json.Unmarshal(b, &list) != nil {
		return
	}
	for _, e := range list {
		pl.counts[e.ProofEntry] = e
	}
}

// writeCounts rewrites the kept counts in dir, under pl.mu.
func (pl *ProofLog) writeCounts(dir *cachedir.Dir) error {
	list := make([]countsEntry, 0, len(pl.counts))
	for _, e := range pl.counts {
		list = append(list, e)
	}
	// In a stable order, so that equal sets write equal files.
	slices.SortFunc(list, func(a, b countsEntry) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Cuts, b.Cuts), cmp.Compare(a.Version, b.Version))
	})
	return dir.WriteFile(countsLogName(pl.src), func(w io.Writer) error { return json.NewEncoder(w).Encode(list) })
}

// AddCounts keeps counts, the record count of every block of file fi of
// ix as a loader learned them, for the next mount. The caller has proven
// the file's cuts where its format needs a proof (probe_proof.go in
// blockcache). Counts of another length than the file's blocks, or with a
// block of no record, are not kept.
func (pl *ProofLog) AddCounts(ix *Index, fi int32, counts []int32) {
	if pl == nil {
		return
	}
	if _, n := ix.FileBlocks(fi); int(n) != len(counts) || n == 0 || slices.Contains(counts, 0) {
		return
	}
	e := countsEntry{ProofEntry: ix.ProofEntry(fi), Format: countsFormat(ix)}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if old, ok := pl.counts[e.ProofEntry]; ok && old.Format == e.Format && slices.Equal(old.Counts, counts) {
		return
	}
	e.Counts = slices.Clone(counts)
	pl.counts[e.ProofEntry], pl.countsDirty = e, true
	pl.flushDue()
}

// FillCounts gives the blocks of a probed index ix whose record counts
// are not known the counts an earlier mount kept for their file (see
// above), and returns how many files it filled. A file is filled whole or
// not at all, and only when its identity, its cuts and the format are the
// ones the counts were learned with and, for a format whose probe must be
// proven, its cuts are proven in pl. Call it before ix is used: it
// changes the index's counts (and CountsUnknown once every count is
// known).
func (pl *ProofLog) FillCounts(ix *Index, log *slog.Logger) int {
	if pl == nil || !ix.Probed || !ix.CountsUnknown {
		return 0
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	_, chained := ix.Fmt().(formats.Chainer)
	format := countsFormat(ix)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pl.counts) == 0 {
		return 0
	}
	pl.pruneCounts(ix)
	filled, unknown, before := 0, false, ix.Records
	for fi := range ix.Files {
		first, n := ix.FileBlocks(int32(fi))
		blocks := ix.Blocks[first : first+n]
		if !slices.ContainsFunc(blocks, func(b Block) bool { return b.Records == 0 }) {
			continue // known (records of one size, or scanned whole)
		}
		id := ix.ProofEntry(int32(fi))
		e, ok := pl.counts[id]
		switch {
		case !ok:
		case e.Format != format:
			log.Debug("probe index: record counts kept for another format; learning them again", "file", ix.Path(int32(fi)), "kept_for", e.Format, "format", format)
			ok = false
		case len(e.Counts) != len(blocks) || slices.ContainsFunc(e.Counts, func(c int32) bool { return c <= 0 }):
			ok = false
		case chained && !pl.set[id]:
			// Kept only once proven: a proof log that lost the entry
			// (rewritten afresh) leaves the file to be walked again,
			// and its counts learned again with it.
			ok = false
		}
		if !ok {
			unknown = true
			continue
		}
		var sum int64
		for j := range blocks {
			blocks[j].Records = e.Counts[j]
			sum += int64(e.Counts[j])
		}
		ix.Files[fi].Records = sum
		ix.Records += sum
		filled++
	}
	ix.CountsUnknown = unknown
	ix.countsKept += filled
	ix.keptRecords += ix.Records - before
	return filled
}

// pruneCounts drops, under pl.mu, the counts kept for an earlier version
// of a file of ix (same path, another size, mtime or version): no index
// will ask for them again, and without this a dataset rewritten epoch
// after epoch would grow the list without end. Counts of the same version
// at other cuts stay (an index at another block size may be mounted
// again), as do those of paths ix does not list (a mount of part of the
// source).
func (pl *ProofLog) pruneCounts(ix *Index) {
	current := make(map[string]int, len(ix.Files))
	for fi, f := range ix.Files {
		current[f.Path] = fi
	}
	for id := range pl.counts {
		fi, ok := current[id.Path]
		if !ok {
			continue
		}
		if f := &ix.Files[fi]; f.Size != id.Size || f.Mtime != id.Mtime || f.Version != id.Version {
			delete(pl.counts, id)
			pl.countsDirty = true
		}
	}
}

// ForgetCounts drops every kept count of pl's source, in memory and in
// the cache directory: a block did not match what the index said of it,
// and a count may be what was wrong.
func (pl *ProofLog) ForgetCounts() error {
	if pl == nil {
		return nil
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	clear(pl.counts)
	pl.countsDirty = false
	if pl.o.CacheDir == "" {
		return nil
	}
	dir, err := pl.openDir()
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Remove(countsLogName(pl.src))
}
