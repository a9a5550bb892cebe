package formats

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"iter"
	"maps"
)

// WDS is the Format of WebDataset tar shards. A record is a sample: the
// run of consecutive members whose names share a key, the member path up
// to the first dot of its last path component (WebDataset's
// base_plus_ext rule). The sample's bytes are copied verbatim: every
// member's header, the pax ('x') and GNU long-name ('L', 'K') headers
// that belong to it, its data and padding. Members WebDataset itself
// skips (not regular files, names without a dot, top-level __meta__
// files) have no key and stay with the sample before them; those before
// the first sample of a shard belong to none and are not served.
//
// Keys should be unique across the dataset: two samples of one key from
// different shards may meet in a part, and a WebDataset reader would
// merge them into one.
//
// Header checksums are checked when indexing and when loading. A global
// pax header ('g'), the members of one key that are not consecutive, a
// truncated shard, or bytes after the end-of-archive marker that are not
// zero are errors naming the member and its offset. A served part is its
// samples followed by the two zero blocks that end a tar archive.
type WDS struct{}

func (WDS) Name() string      { return "wds" }
func (WDS) Include() []string { return []string{"*.tar"} }
func (WDS) Ext() string       { return ".tar" }
func (WDS) Checksummed() bool { return false }

func (WDS) Head(r io.ReaderAt, size int64) (Head, error) {
	if size%tarBlock != 0 {
		return Head{}, fmt.Errorf("tar shard of %d bytes is not a whole number of %d-byte blocks (truncated?)", size, tarBlock)
	}
	return Head{Start: 0, End: size}, nil
}

func (WDS) Scan(r io.ReaderAt, h Head, start, end int64) RecordScanner {
	s := &wdsScanner{src: &readerAtSrc{r: r, end: end}, end: end}
	s.w = sampleWalker{off: start, start: start, seen: map[string]int64{}}
	return s
}

func (WDS) SplitFilled(h Head, buf []byte, filled, from, base int64, starts []int64) ([]int64, int64, error) {
	src := &memSrc{buf: buf, filled: filled}
	w := sampleWalker{off: from, start: from}
	for w.off < filled {
		m, cut, prev, err := w.step(src)
		if errors.Is(err, errNeedMore) && filled < int64(len(buf)) {
			return starts, w.start, nil
		}
		if err != nil {
			return starts, w.start, rebase(err, base)
		}
		if m.eoa {
			return starts, w.start, &CorruptError{Offset: base + m.start, Reason: "end-of-archive marker inside a block"}
		}
		if cut {
			starts = append(starts, prev)
		}
	}
	if filled < int64(len(buf)) {
		return starts, w.start, nil
	}
	if w.off > w.start {
		starts = append(starts, w.start)
	}
	return starts, w.off, nil
}

func (WDS) AppendPrologue(dst []byte, h Head, records int64) []byte { return dst }

// AppendEpilogue appends the end-of-archive marker.
func (WDS) AppendEpilogue(dst []byte, h Head) []byte {
	return append(dst, make([]byte, 2*tarBlock)...)
}

func (WDS) NewReader(r io.Reader) RecordReader {
	return &wdsReader{src: streamSrc{r: r}, w: sampleWalker{seen: map[string]int64{}}}
}

// SampleMembers calls fn with the name and data of every regular member
// of a sample, as a RecordReader of WDS returns it (the validator reads
// "KEY.cls" and "KEY.bin" this way). It stops at fn's first error.
func SampleMembers(sample []byte, fn func(name string, data []byte) error) error {
	src := &memSrc{buf: sample, filled: int64(len(sample))}
	var nb []byte
	for off := int64(0); off < int64(len(sample)); {
		m, err := nextMember(src, off, &nb)
		if err != nil {
			return err
		}
		if m.eoa {
			return &CorruptError{Offset: m.start, Reason: "end-of-archive marker inside a sample"}
		}
		if _, ok := wdsKey(m.name, m.flag); ok {
			if err := fn(string(m.name), sample[m.data:m.data+m.size]); err != nil {
				return err
			}
		}
		off = m.end
	}
	return nil
}

// Keys returns the sample keys the scanner met, for a KeySet.
func (s *wdsScanner) Keys() iter.Seq[string] { return maps.Keys(s.w.seen) }

// KeySet finds a sample key used in two shards of a dataset: two such
// samples may meet in a part, where a WebDataset reader would merge them
// into one. It keeps a 64-bit hash of each key and the shard's number,
// about 20 bytes a sample while indexing; a hash collision (odds about
// n²/2⁶⁵ for n samples) would report a duplicate that is not one, so
// the error says to check.
type KeySet struct {
	seed   maphash.Seed
	seen   map[uint64]int32
	shards []string
}

// NewKeySet returns an empty KeySet.
func NewKeySet() *KeySet { return &KeySet{seed: maphash.MakeSeed(), seen: map[uint64]int32{}} }

// Add records the keys of one shard, and fails if one of them was in a
// shard added before.
func (k *KeySet) Add(shard string, keys iter.Seq[string]) error {
	id := int32(len(k.shards))
	k.shards = append(k.shards, shard)
	for key := range keys {
		h := maphash.String(k.seed, key)
		if prev, dup := k.seen[h]; dup && prev != id {
			return fmt.Errorf("wds: sample key %q of shard %s is also in shard %s: keys must be unique across shards, or samples of one key would be merged by a WebDataset reader (a sample split across shards?)", key, shard, k.shards[prev])
		}
		k.seen[h] = id
	}
	return nil
}

// ShardEdgeError reports a sample split across two shards: the last key
// of shard a is the first key of shard b, which follows it. The index
// calls it for every pair of consecutive shards, with the keys their
// scanners' SampleKeys give.
func ShardEdgeError(a, lastA, b, firstB string) error {
	if lastA == "" || lastA != firstB {
		return nil
	}
	return fmt.Errorf("wds: sample %q is split across shards %s and %s; a sample's members must all be in one shard", lastA, a, b)
}

// wdsKey returns the sample key of a member, as WebDataset's
// base_plus_ext regular expression ^((?:.*/|)[^.]+)[.]([^/]*)$ finds it,
// and false for members WebDataset skips.
func wdsKey(name []byte, flag byte) ([]byte, bool) {
	if flag != '0' && flag != 0 && flag != '7' {
		return nil, false
	}
	slash := bytes.LastIndexByte(name, '/')
	if slash < 0 && bytes.HasPrefix(name, []byte("__")) && bytes.HasSuffix(name, []byte("__")) {
		return nil, false
	}
	base := name[slash+1:]
	dot := bytes.IndexByte(base, '.')
	switch {
	case dot < 0:
		return nil, false
	case dot > 0:
		return name[:slash+1+dot], true
	case slash < 0:
		return nil, false
	}
	// The last component starts with a dot: [^.]+ may reach back across
	// the last slash if the directory component before it has no dot.
	prev := bytes.LastIndexByte(name[:slash], '/')
	if bytes.IndexByte(name[prev+1:slash], '.') >= 0 {
		return nil, false
	}
	return name[:slash+1], true
}

// sampleWalker groups members into samples.
type sampleWalker struct {
	off   int64 // the next member
	start int64 // the current sample
	key   []byte
	nb    []byte           // the name of the member being read
	has   bool             // the current sample has a key
	seen  map[string]int64 // keys met so far and their sample's offset; nil: not checked
}

// step reads the next member. cut says it starts a new sample, the one
// before being [prev, m.start).
func (w *sampleWalker) step(src tarSrc) (m tarMember, cut bool, prev int64, err error) {
	m, err = nextMember(src, w.off, &w.nb)
	if err != nil || m.eoa {
		return m, false, 0, err
	}
	key, ok := wdsKey(m.name, m.flag)
	if ok && w.has && !bytes.Equal(key, w.key) {
		if at, dup := w.seen[string(key)]; dup {
			return m, false, 0, &CorruptError{Offset: m.start, Reason: fmt.Sprintf("member %q: key %q already has members in the sample at offset %d; the members of a sample must be consecutive", m.name, key, at)}
		}
		cut, prev = true, w.start
		w.start = m.start
	}
	if !ok && !w.has {
		// Members before the first keyed one (a directory entry, a
		// README) belong to no sample and are not served: kept with the
		// first sample they would move to another sample's end in a part.
		w.start = m.end
	}
	if ok && (cut || !w.has) {
		w.key, w.has = append(w.key[:0], key...), true
		if w.seen != nil {
			w.seen[string(key)] = w.start
		}
	}
	w.off = m.end
	return m, cut, prev, nil
}

// wdsScanner is the RecordScanner of WDS: it reads headers only.
type wdsScanner struct {
	src         *readerAtSrc
	w           sampleWalker
	end         int64
	rec         Record
	err         error
	done        bool
	first, last string
}

func (s *wdsScanner) Next() bool {
	if s.err != nil || s.done {
		return false
	}
	for {
		m, cut, prev, err := s.w.step(s.src)
		if err != nil {
			s.err = err
			return false
		}
		if m.eoa {
			s.done = true
			if err := s.src.zeroFrom(m.end); err != nil {
				s.err = err
				return false
			}
			if !s.w.has {
				return false // no sample at all: members without a key are not served alone
			}
			s.rec = Record{s.w.start, m.start - s.w.start}
			s.w.off = m.start
			s.last = string(s.w.key)
			return true
		}
		if s.first == "" && s.w.has {
			s.first = string(s.w.key)
		}
		if cut {
			s.rec = Record{prev, m.start - prev}
			return true
		}
	}
}

func (s *wdsScanner) Record() Record { return s.rec }
func (s *wdsScanner) Offset() int64  { return s.w.off }
func (s *wdsScanner) Err() error     { return s.err }

// SampleKeys returns the keys of the first and last samples scanned, for
// ShardEdgeError.
func (s *wdsScanner) SampleKeys() (first, last string) { return s.first, s.last }

// wdsReader is the RecordReader of WDS.
type wdsReader struct {
	src  streamSrc
	w    sampleWalker
	done bool
}

func (r *wdsReader) Prologue() []byte { return nil }

func (r *wdsReader) Next() ([]byte, error) {
	if r.done {
		return nil, io.EOF
	}
	// Drop the sample returned last: the stream's bytes before the
	// current sample are no longer needed.
	if d := r.w.start - r.src.pos; d > 0 {
		r.src.buf = r.src.buf[:copy(r.src.buf, r.src.buf[d:])]
		r.src.pos = r.w.start
	}
	for {
		m, cut, prev, err := r.w.step(&r.src)
		if err != nil {
			return nil, err
		}
		if m.eoa {
			r.done = true
			if err := r.trailer(m.end); err != nil {
				return nil, err
			}
			if !r.w.has {
				return nil, io.EOF
			}
			return r.src.buf[r.w.start-r.src.pos : m.start-r.src.pos], nil
		}
		if cut {
			return r.src.buf[prev-r.src.pos : m.start-r.src.pos], nil
		}
	}
}

// trailer reads what follows the end-of-archive marker at off: zeros
// up to the end of the stream.
func (r *wdsReader) trailer(off int64) error {
	var b [tarBlock]byte
	for {
		n, err := io.ReadFull(r.src.r, b[:])
		if !isZero(b[:n]) {
			return &CorruptError{Offset: off, Reason: "data after the end-of-archive marker (two archives concatenated?)"}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
