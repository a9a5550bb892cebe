package shuffler

import (
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"path/filepath"
	"slices"
)

// Elastic resume (docs/elastic.md). A checkpoint taken mid-epoch says, for
// each of the K parts of epoch e, how many records the trainer consumed:
// c_0 ... c_{K-1}. The records of the epoch not yet consumed are, for each
// part i, the records its plan serves after the first c_i (its padding
// aside): plans are pure, so every node computes the same set. That set is
// served again as K' parts, for any K', exactly once and deterministically:
//
//  1. Each buffer of each old part contributes a unit: the records of the
//     buffer it still has to serve, in the order the buffer served them,
//     read from the buffer's blocks that hold at least one of them (a large
//     read, as CorgiPile's), or one by one where the buffer read records.
//  2. The units, listed by part then buffer, are put in a random order: a
//     Fisher–Yates permutation drawn from Derive(seed, 12, e, h), where h
//     is the FNV-1a hash of the resume's token chain. The order does not
//     depend on K', so resumes at different K' split the same sequence.
//  3. The sequence of their records, R in all, is cut into K' runs by
//     record count: new part j serves positions [R·j/K', R·(j+1)/K'), so
//     the parts differ by at most one record (--equal-parts pads the
//     shorter ones with one repeat of their first record, or, for an empty
//     part, of the sequence's record at R·j/K' mod R). A unit cut between
//     two parts is loaded by both, each serving its own records.
//
// A resume is named by the file system, so the mount stays read-only and
// every node resolves the same name to the same bytes:
// epoch-EEEE/resume-TOKEN/part-JJJJJ-of-KKKKK.ext (ResumeDir). A resume
// part may itself be checkpointed and resumed at another K'': its
// directory then holds resume-TOKEN2/, resolved from the plans of its K'
// parts as above.

// ResumeToken is a checkpoint of one epoch: K and the records consumed of
// each of its parts.
type ResumeToken struct {
	Parts    int
	Consumed []int64 // len Parts
}

const (
	resumeVersion = 1
	// ResumePrefix starts the name of a resume directory.
	ResumePrefix = "resume-"
	// MaxTokenChunk is the longest piece of a token in one path component:
	// a long token (many parts) continues in subdirectories, since a name
	// is at most 255 bytes.
	MaxTokenChunk = 200
	// MaxTokenLen bounds a token (about 5 KiB of a path: PATH_MAX is 4 KiB
	// for a path given whole, longer ones need a walk by directory).
	MaxTokenLen = 64 << 10
)

// purposeResume seeds the order of the units of a resume.
const purposeResume = 12

// tokenEncoding is lower-case base32 without padding: letters and digits
// only, so that a token never looks like a part name.
var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// String encodes t: base32 of uvarint(version) uvarint(K) uvarint(c_i)...
// followed by the CRC-32 (IEEE) of those bytes, little-endian.
func (t ResumeToken) String() string {
	b := binary.AppendUvarint(nil, resumeVersion)
	b = binary.AppendUvarint(b, uint64(t.Parts))
	for _, c := range t.Consumed {
		b = binary.AppendUvarint(b, uint64(c))
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return tokenEncoding.EncodeToString(b)
}

// ParseResumeToken decodes a token that ResumeToken.String gave, with K at
// most maxParts. Any other spelling is refused, so that every checkpoint
// has exactly one name.
func ParseResumeToken(s string, maxParts int) (ResumeToken, error) {
	var t ResumeToken
	b, err := tokenEncoding.DecodeString(s)
	if err != nil || len(b) < 4 {
		return t, fmt.Errorf("resume token %.40q: not lower-case base32 of a checkpoint", s)
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return t, fmt.Errorf("resume token %.40q: checksum mismatch (truncated or mistyped)", s)
	}
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(body)
		if n <= 0 {
			return 0, false
		}
		body = body[n:]
		return v, true
	}
	v, ok := next()
	if !ok || v != resumeVersion {
		return t, fmt.Errorf("resume token %.40q: version %d, this daemon reads version %d", s, v, resumeVersion)
	}
	k, ok := next()
	if !ok || k < 1 || k > uint64(maxParts) {
		return t, fmt.Errorf("resume token %.40q: %d parts, want 1 to %d", s, k, maxParts)
	}
	t.Parts = int(k)
	t.Consumed = make([]int64, 0, k)
	for range k {
		c, ok := next()
		if !ok || c > 1<<40 {
			return t, fmt.Errorf("resume token %.40q: bad record count", s)
		}
		t.Consumed = append(t.Consumed, int64(c))
	}
	if len(body) != 0 || t.String() != s {
		return t, fmt.Errorf("resume token %.40q: not in canonical form", s)
	}
	return t, nil
}

// ResumeDir returns the path, relative to an epoch directory, of the
// resume directory of the chain of tokens (a resume of a resume after the
// first): resume-TOKEN, a token longer than MaxTokenChunk continuing in
// subdirectories named by its next pieces.
func ResumeDir(chain ...ResumeToken) string {
	var parts []string
	for _, t := range chain {
		s := t.String()
		first := true
		for len(s) > 0 || first {
			n := min(len(s), MaxTokenChunk)
			piece := s[:n]
			if first {
				piece = ResumePrefix + piece
				first = false
			}
			parts = append(parts, piece)
			s = s[n:]
		}
	}
	return filepath.Join(parts...)
}

// ResumePartPath returns the path of part i of k of the resume of epoch e
// named by chain, under the mount point mnt.
func ResumePartPath(mnt string, e int, chain []ResumeToken, i, k int, ext string) string {
	return filepath.Join(mnt, EpochName(e), ResumeDir(chain...), PartName(i, k, ext))
}

// IsTokenChunk reports whether name may be a piece of a token.
func IsTokenChunk(name string) bool {
	if name == "" || len(name) > MaxTokenChunk {
		return false
	}
	for _, c := range []byte(name) {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// ErrNoResume says that a strategy's epochs cannot be resumed at another K.
var ErrNoResume = errors.New("elastic resume is not defined for this strategy")

// resumeUnit is the rest of one buffer of an old part.
type resumeUnit struct {
	blocks []int32 // to load, in order; nil: ids are loaded one by one
	ids    []int32 // the records to serve, in served order
}

// Resume is the records of an epoch not consumed at a checkpoint, in the
// order that its K' parts serve them, for any K'.
type Resume struct {
	pl     *Planner
	epoch  int
	units  []resumeUnit
	starts []int64 // records before unit u; starts[len(units)] is R
}

// Resume returns the resume of epoch from the checkpoints of chain: the
// first of the epoch's parts, each next one of the parts of the resume
// before it.
func (pl *Planner) Resume(epoch int, chain ...ResumeToken) (*Resume, error) {
	s := pl.p.Strategy
	if s == "mrs" || IsFeedback(s) {
		return nil, fmt.Errorf("epoch %d, strategy %s: %w (mrs serves a record in this epoch or the next; "+
			"the feedback strategies order the next epoch from this one's feedback, by part): resume with the same K", epoch, s, ErrNoResume)
	}
	if pl.ix.Probed {
		return nil, fmt.Errorf("epoch %d: a resume lists the records of the epoch's parts, which a probed index lacks: mount with {index} full", epoch)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("epoch %d: a resume needs a checkpoint", epoch)
	}
	var r *Resume
	h := fnv.New64a()
	for n, t := range chain {
		h.Write([]byte(t.String()))
		h.Write([]byte{'/'})
		plans := make([]*Plan, t.Parts)
		for i := range plans {
			var err error
			if r == nil {
				plans[i], err = pl.Plan(epoch, i, t.Parts)
			} else {
				plans[i], err = r.Plan(i, t.Parts)
			}
			if err != nil {
				return nil, err
			}
		}
		next, err := pl.resumeOf(epoch, plans, t, Derive(pl.p.Seed, purposeResume, uint64(epoch), h.Sum64()))
		if err != nil {
			return nil, fmt.Errorf("epoch %d, checkpoint %d of %d: %w", epoch, n+1, len(chain), err)
		}
		r = next
	}
	return r, nil
}

// Records returns R, the records the resume serves across its parts
// (padding aside).
func (r *Resume) Records() int64 { return r.starts[len(r.starts)-1] }

// resumeOf collects the records the plans have not served after the counts
// of t, in units, and orders the units by seed.
func (pl *Planner) resumeOf(epoch int, plans []*Plan, t ResumeToken, seed uint64) (*Resume, error) {
	r := &Resume{pl: pl, epoch: epoch}
	var loaded, served []int32
	var perm []uint32
	for i, p := range plans {
		c := t.Consumed[i]
		if c > p.Records {
			return nil, fmt.Errorf("part %d of %d holds %d records, the checkpoint says %d were consumed: "+
				"it was taken from another epoch, K, seed or dataset", i, t.Parts, p.Records, c)
		}
		real := p.Records - int64(p.Padding) // padding is served last
		var at int64                         // served records of the part before the buffer
		for g := range p.Buffers {
			if at >= real {
				break
			}
			b := &p.Buffers[g]
			loaded = pl.loadedRecords(loaded[:0], b)
			n := len(loaded)
			if b.Perm != nil {
				n = len(b.Perm)
			}
			lo, hi := max(0, c-at), min(int64(n), real-at)
			at += int64(n)
			if lo >= hi {
				continue
			}
			served = slices.Grow(served[:0], n)[:n]
			switch {
			case b.Perm != nil:
				for k, q := range b.Perm {
					served[k] = loaded[q]
				}
			case b.Shuffle:
				perm = slices.Grow(perm[:0], len(loaded))[:len(loaded)]
				permute(perm, b.Seed)
				for k, q := range perm {
					served[k] = loaded[q]
				}
			default:
				copy(served, loaded)
			}
			u := resumeUnit{ids: slices.Clone(served[lo:hi])}
			if b.Records == nil {
				u.blocks = pl.blocksOf(b.Blocks, u.ids)
			}
			r.units = append(r.units, u)
		}
	}
	ord := make([]uint32, len(r.units))
	permute(ord, seed)
	units := make([]resumeUnit, len(r.units))
	r.starts = make([]int64, len(units)+1)
	for k, q := range ord {
		units[k] = r.units[q]
		r.starts[k+1] = r.starts[k] + int64(len(units[k].ids))
	}
	r.units = units
	return r, nil
}

// loadedRecords appends the record ids of buffer b in the order the loader
// puts them in its slab.
func (pl *Planner) loadedRecords(dst []int32, b *Buffer) []int32 {
	if b.Records != nil {
		return append(dst, b.Records...)
	}
	for _, id := range b.Blocks {
		first := int32(pl.ix.BlockRecords(id))
		for k := range pl.ix.Blocks[id].Records {
			dst = append(dst, first+k)
		}
	}
	return dst
}

// blocksOf returns the blocks of blocks, in their order, that hold at least
// one of the records ids.
func (pl *Planner) blocksOf(blocks, ids []int32) []int32 {
	byFirst := slices.Clone(blocks)
	slices.SortFunc(byFirst, func(a, b int32) int { return int(pl.ix.BlockRecords(a) - pl.ix.BlockRecords(b)) })
	used := make(map[int32]bool, len(blocks))
	for _, r := range ids {
		used[pl.blockHolding(byFirst, r)] = true
	}
	return slices.DeleteFunc(slices.Clone(blocks), func(b int32) bool { return !used[b] })
}

// blockHolding returns the block of sorted (by first record) that holds r.
func (pl *Planner) blockHolding(sorted []int32, r int32) int32 {
	j, _ := slices.BinarySearchFunc(sorted, r, func(b, r int32) int {
		first := int32(pl.ix.BlockRecords(b))
		switch {
		case r < first:
			return 1
		case r >= first+pl.ix.Blocks[b].Records:
			return -1
		}
		return 0
	})
	return sorted[j]
}

// slabPositions returns the positions of ids in the slab of blocks (their records
// in block order).
func (pl *Planner) slabPositions(blocks, ids []int32) []int32 {
	byFirst := slices.Clone(blocks)
	slices.SortFunc(byFirst, func(a, b int32) int { return int(pl.ix.BlockRecords(a) - pl.ix.BlockRecords(b)) })
	base := make(map[int32]int32, len(blocks))
	var at int32
	for _, b := range blocks {
		base[b] = at
		at += pl.ix.Blocks[b].Records
	}
	pos := make([]int32, len(ids))
	for k, r := range ids {
		b := pl.blockHolding(byFirst, r)
		pos[k] = base[b] + r - int32(pl.ix.BlockRecords(b))
	}
	return pos
}

// Plan returns the plan of part of parts of the resume: its share of the
// units' records, a buffer for each unit or piece of one.
func (r *Resume) Plan(part, parts int) (*Plan, error) {
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("no part %d of %d in a resume of epoch %d", part, parts, r.epoch)
	}
	pl := r.pl
	total := r.Records()
	lo, hi := total*int64(part)/int64(parts), total*int64(part+1)/int64(parts)
	p := &Plan{Epoch: r.epoch, Part: part, Parts: parts}
	// add appends buffer b, which serves the records ids.
	add := func(b Buffer, ids []int32) {
		for _, id := range ids {
			b.Size += int64(pl.ix.Frames[id])
		}
		b.Start, b.Epoch, b.Count = p.Size, r.epoch, len(ids)
		p.Size += b.Size
		p.Records += int64(b.Count)
		p.Target = max(p.Target, b.Size)
		p.Buffers = append(p.Buffers, b)
	}
	u, _ := slices.BinarySearch(r.starts, lo+1)
	for u--; u >= 0 && u < len(r.units) && r.starts[u] < hi; u++ {
		unit := &r.units[u]
		a, b := max(lo, r.starts[u])-r.starts[u], min(hi, r.starts[u+1])-r.starts[u]
		ids := unit.ids[a:b:b]
		if len(ids) == 0 {
			continue
		}
		if unit.blocks == nil {
			add(Buffer{Records: ids}, ids)
			continue
		}
		blocks := unit.blocks
		if a > 0 || int(b) < len(unit.ids) {
			blocks = pl.blocksOf(unit.blocks, ids)
		}
		add(Buffer{Blocks: blocks, Perm: pl.slabPositions(blocks, ids), Subset: true}, ids)
	}
	if pl.p.EqualParts && parts > 1 && total > 0 {
		most := (total + int64(parts) - 1) / int64(parts)
		if d := most - (hi - lo); d > 0 {
			at := lo % total
			if hi > lo {
				at = lo
			}
			ids := []int32{r.record(at)}
			add(Buffer{Records: ids}, ids)
			p.Padding = 1
		}
	}
	f := pl.ix.Fmt()
	p.Prologue = f.AppendPrologue(nil, pl.ix.Head, p.Records)
	p.Epilogue = f.AppendEpilogue(nil, pl.ix.Head)
	for i := range p.Buffers {
		p.Buffers[i].Start += int64(len(p.Prologue))
	}
	p.Size += int64(len(p.Prologue) + len(p.Epilogue))
	return p, nil
}

// record returns the record at position at of the resume's sequence.
func (r *Resume) record(at int64) int32 {
	u, _ := slices.BinarySearch(r.starts, at+1)
	u--
	return r.units[u].ids[at-r.starts[u]]
}
