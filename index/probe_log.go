package index

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/corgifs/corgifs/internal/cachedir"
	"github.com/corgifs/corgifs/source"
)

// The files whose probe was proved wrong, so that every later probed index
// of the source scans them whole. The list is kept in the cache directory,
// keyed by the source alone (not the block size or format), and each entry
// by the file's identity: a file that changes is probed again.
type wholeEntry struct {
	Path    string
	Size    int64
	Mtime   int64
	Version string
}

// wholeListName is the list's name in the cache directory.
func wholeListName(src source.Source) string {
	sum := sha256.Sum256([]byte(src.ID()))
	return hex.EncodeToString(sum[:12]) + ".probe-whole"
}

// maxWholeList bounds the list read back (it holds a few files at most).
const maxWholeList = 4 << 20

// MarkProbeWrong records that the probe of file (an index file of src)
// was proved wrong, so that the next probed index of src scans it whole,
// and marks the sidecar stale with reason so that the next Open rebuilds.
func MarkProbeWrong(src source.Source, o Options, file File, reason string) error {
	dir, o, err := openRootCacheDir(src, o)
	if dir == nil || err != nil {
		return err
	}
	name := wholeListName(src)
	list := readWholeList(dir, name)
	e := wholeEntry{file.Path, file.Size, file.Mtime, file.Version}
	if !slices.Contains(list, e) {
		list = append(list, e)
		err = dir.WriteFile(name, func(w io.Writer) error { return json.NewEncoder(w).Encode(list) })
	}
	dir.Close()
	if err != nil {
		return err
	}
	return MarkStale(src, o, reason)
}

func readWholeList(dir *cachedir.Dir, name string) []wholeEntry {
	if !dir.Exists(name) {
		return nil
	}
	b, err := dir.ReadFile(name, maxWholeList)
	var list []wholeEntry
	if err != nil || json.Unmarshal(b, &list) != nil {
		return nil // rewritten whole at the next mark
	}
	return list
}

// scanWhole returns, for each file of ix, whether an earlier load proved
// its probe wrong (MarkProbeWrong) while it kept its identity.
func (ix *Index) scanWhole(o Options) []bool {
	if o.CacheDir == "" {
		return nil
	}
	path, err := cacheDirFor(o.CacheDir, ix.src)
	if err != nil {
		return nil
	}
	dir, err := cachedir.OpenPath(path)
	if err != nil {
		return nil
	}
	defer dir.Close()
	list := readWholeList(dir, wholeListName(ix.src))
	if list == nil {
		return nil
	}
	whole := make([]bool, len(ix.Files))
	for i, f := range ix.Files {
		whole[i] = slices.Contains(list, wholeEntry{f.Path, f.Size, f.Mtime, f.Version})
	}
	return whole
}

// ProofEntry is a file whose probed cuts were proven: its identity, and
// a hash of the cuts (another block size cuts elsewhere).
type ProofEntry struct {
	Path    string
	Size    int64
	Mtime   int64
	Version string
	Cuts    string
}

// ProofLog keeps, in the cache directory, the files whose probed cuts a
// record-chain walk proved, so that a remount (whose blocks may come from
// the disk cache) does not walk them again. A boundary proven once stays
// proven while the file keeps its identity (path, size, mtime, version)
// and the index its cuts. New entries are written at most every
// proofFlushEvery and at Close.
//
// Beside the proofs it keeps the record counts a loader learned for every
// block of a file (counts.go), so that the next mount's probed index knows
// them (FillCounts).
type ProofLog struct {
	src     source.Source
	o       Options
	mu      sync.Mutex
	set     map[ProofEntry]bool
	dirty   bool
	flushed time.Time
	// counts are the files' learned record counts, by identity and cuts;
	// countsDirty says they changed since they were written.
	counts      map[ProofEntry]countsEntry
	countsDirty bool
}

// proofFlushEvery is how often at most a ProofLog is rewritten while a
// mount proves files (the whole list each time).
const proofFlushEvery = 10 * time.Second

// maxProofLog bounds the list read back: past it, it starts afresh.
const maxProofLog = 64 << 20

// proofLogName is the log's name in the cache directory.
func proofLogName(src source.Source) string {
	sum := sha256.Sum256([]byte(src.ID()))
	return hex.EncodeToString(sum[:12]) + ".probe-proven"
}

// OpenProofLog reads the proofs kept for src: an empty log when there
// are none or no cache directory.
func OpenProofLog(src source.Source, o Options) (*ProofLog, error) {
	o.fill()
	pl := &ProofLog{src: src, o: o, set: map[ProofEntry]bool{}, counts: map[ProofEntry]countsEntry{}, flushed: time.Now()}
	if o.CacheDir == "" {
		return pl, nil
	}
	path, err := cacheDirFor(o.CacheDir, src)
	if err != nil {
		return pl, err
	}
	dir, err := cachedir.OpenPath(path)
	if err != nil {
		return pl, err
	}
	defer dir.Close()
	pl.readCounts(dir)
	name := proofLogName(src)
	if !dir.Exists(name) {
		return pl, nil
	}
	b, err := dir.ReadFile(name, maxProofLog)
	var list []ProofEntry
	if err != nil || json.Unmarshal(b, &list) != nil {
		return pl, nil // rewritten at the next flush
	}
	for _, e := range list {
		pl.set[e] = true
	}
	return pl, nil
}

func (pl *ProofLog) Has(e ProofEntry) bool {
	if pl == nil {
		return false
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.set[e]
}

func (pl *ProofLog) Add(e ProofEntry) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.set[e] {
		return
	}
	pl.set[e], pl.dirty = true, true
	pl.flushDue()
}

// flushDue flushes when the last flush is proofFlushEvery old, under
// pl.mu.
func (pl *ProofLog) flushDue() {
	if time.Since(pl.flushed) >= proofFlushEvery {
		pl.flush() // a failure is tried again at the next flush
	}
}

// flush rewrites the lists that changed, under pl.mu. A failure leaves
// them dirty: proofs not kept only cost a walk at the next mount, counts
// not kept a mount that serves a buffer once it is loaded whole.
func (pl *ProofLog) flush() error {
	pl.flushed = time.Now()
	if !pl.dirty && !pl.countsDirty || pl.o.CacheDir == "" {
		return nil
	}
	dir, err := pl.openDir()
	if err != nil {
		return err
	}
	defer dir.Close()
	if pl.countsDirty {
		if err := pl.writeCounts(dir); err != nil {
			return err
		}
		pl.countsDirty = false
	}
	if !pl.dirty {
		return nil
	}
	list := make([]ProofEntry, 0, len(pl.set))
	for e := range pl.set {
		list = append(list, e)
	}
	if err := dir.WriteFile(proofLogName(pl.src), func(w io.Writer) error { return json.NewEncoder(w).Encode(list) }); err != nil {
		return err
	}
	pl.dirty = false
	return nil
}

// openDir opens the cache directory of pl's source, where its proofs and
// kept counts are written.
func (pl *ProofLog) openDir() (*cachedir.Dir, error) {
	path, err := cacheDirFor(pl.o.CacheDir, pl.src)
	if err != nil {
		return nil, err
	}
	return cachedir.OpenPath(path)
}

// Close writes the proofs not yet written.
func (pl *ProofLog) Close() error {
	if pl == nil {
		return nil
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.flush()
}
