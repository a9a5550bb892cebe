package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"iter"
	"maps"
	"strconv"
	"strings"
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

const (
	tarBlock = 512
	// maxTarMeta bounds the pax and long-name data read into memory.
	maxTarMeta = 1 << 20
)

var errNeedMore = errors.New("need more bytes")

// tarSrc gives the member walker the bytes of an archive.
type tarSrc interface {
	// bytes returns the n bytes at off (headers, pax data), valid until
	// the next call.
	bytes(off, n int64) ([]byte, error)
	// skip passes over the n data bytes of a member at off.
	skip(off, n int64) error
}

// tarMember is one member of an archive, with the extended headers
// before it: its bytes are [start, end).
type tarMember struct {
	start, end int64
	name       []byte // valid until the next call of nextMember
	flag       byte
	eoa        bool  // a zero block: the end-of-archive marker
	data, size int64 // where its data starts, and its length
}

func pad512(n int64) int64 { return (n + tarBlock - 1) / tarBlock * tarBlock }

// nextMember reads the member at off. Its name is built in *nb, reused
// from member to member, so that walking a block allocates nothing.
func nextMember(src tarSrc, off int64, nb *[]byte) (tarMember, error) {
	m := tarMember{start: off}
	var haveLong, havePax bool
	paxSize := int64(-1)
	for {
		h, err := src.bytes(off, tarBlock)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return m, &CorruptError{Offset: off, Reason: "truncated tar: no end-of-archive marker (a shard cut short?)"}
			}
			return m, err
		}
		if isZero(h) {
			if off != m.start {
				return m, &CorruptError{Offset: off, Reason: "end-of-archive marker right after an extended header"}
			}
			m.eoa, m.end = true, off+tarBlock
			return m, nil
		}
		if err := tarChecksum(h); err != nil {
			return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("tar header of %q: %v", cString(h[:100]), err)}
		}
		flag := h[156]
		size, err := tarNumber(h[124:136])
		if err != nil {
			return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("tar header of %q: size: %v", cString(h[:100]), err)}
		}
		switch flag {
		case 'x', 'L', 'K':
			if size > maxTarMeta {
				return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("extended header of %d bytes (at most %d)", size, maxTarMeta)}
			}
			d, err := src.bytes(off+tarBlock, size)
			if err != nil {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					return m, &CorruptError{Offset: off, Reason: "truncated tar: extended header runs past the end"}
				}
				return m, err
			}
			switch flag {
			case 'x':
				var path []byte
				if path, paxSize, err = parsePAX(d, paxSize); err != nil {
					return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("pax header: %v", err)}
				}
				if path != nil {
					*nb, havePax = append((*nb)[:0], path...), true
				}
			case 'L':
				if !havePax { // a pax path wins, as in archive/tar
					*nb, haveLong = append((*nb)[:0], cBytes(d)...), true
				}
			}
			off += tarBlock + pad512(size)
			continue
		case 'g':
			return m, &CorruptError{Offset: off, Reason: "global pax header (typeflag 'g'): not supported in a WebDataset shard, since its settings would apply to the samples of other shards in a part; rewrite the shard without it"}
		case 'S', 'M', 'V', 'N', 'D':
			return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("tar member %q of GNU type %q is not supported", cString(h[:100]), flag)}
		}
		if !havePax && !haveLong {
			*nb = (*nb)[:0]
			if string(h[257:263]) == "ustar\x00" {
				if p := cBytes(h[345:500]); len(p) > 0 {
					*nb = append(append(*nb, p...), '/')
				}
			}
			*nb = append(*nb, cBytes(h[:100])...)
		}
		name := *nb
		if paxSize >= 0 {
			size = paxSize
		}
		switch flag {
		case '1', '2', '3', '4', '5', '6':
			size = 0 // header-only types, as archive/tar reads them
		}
		if err := src.skip(off+tarBlock, pad512(size)); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return m, &CorruptError{Offset: off, Reason: fmt.Sprintf("truncated tar: the data of member %q runs past the end", name)}
			}
			return m, err
		}
		m.name, m.flag, m.end = name, flag, off+tarBlock+pad512(size)
		m.data, m.size = off+tarBlock, size
		return m, nil
	}
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

// readerAtSrc is a tarSrc over an io.ReaderAt.
type readerAtSrc struct {
	r   io.ReaderAt
	end int64
	buf []byte
}

func (s *readerAtSrc) bytes(off, n int64) ([]byte, error) {
	if off+n > s.end {
		return nil, io.ErrUnexpectedEOF
	}
	if int64(cap(s.buf)) < n {
		s.buf = make([]byte, max(n, 4<<10))
	}
	b := s.buf[:n]
	k, err := s.r.ReadAt(b, off)
	if int64(k) < n {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("short read at offset %d: file shorter than expected: %w", off+int64(k), io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	return b, nil
}

func (s *readerAtSrc) skip(off, n int64) error {
	if off+n > s.end {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// zeroFrom checks that the bytes from off to the end are zeros: what
// follows the end-of-archive marker is padding, never more members.
func (s *readerAtSrc) zeroFrom(off int64) error {
	for off < s.end {
		b, err := s.bytes(off, min(s.end-off, 64<<10))
		if err != nil {
			return err
		}
		if i := bytes.IndexFunc(b, func(r rune) bool { return r != 0 }); i >= 0 {
			return &CorruptError{Offset: off + int64(i), Reason: "data after the end-of-archive marker (two archives concatenated?)"}
		}
		off += int64(len(b))
	}
	return nil
}

// memSrc is a tarSrc over a block being loaded: only buf[:filled] is
// there yet.
type memSrc struct {
	buf    []byte
	filled int64
}

func (s *memSrc) bytes(off, n int64) ([]byte, error) {
	if err := s.skip(off, n); err != nil {
		return nil, err
	}
	return s.buf[off : off+n], nil
}

func (s *memSrc) skip(off, n int64) error {
	switch {
	case off+n <= s.filled:
		return nil
	case s.filled < int64(len(s.buf)):
		return errNeedMore
	}
	return io.ErrUnexpectedEOF
}

// streamSrc is a tarSrc over a stream: what it reads accumulates in buf,
// whose first byte is at offset pos of the stream.
type streamSrc struct {
	r   io.Reader
	buf []byte
	pos int64
}

func (s *streamSrc) fill(upTo int64) error {
	need := upTo - s.pos
	if need <= int64(len(s.buf)) {
		return nil
	}
	n := int64(len(s.buf))
	s.buf = append(s.buf, make([]byte, need-n)...)
	k, err := io.ReadFull(s.r, s.buf[n:])
	if err != nil {
		s.buf = s.buf[:n+int64(k)]
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

func (s *streamSrc) bytes(off, n int64) ([]byte, error) {
	if err := s.fill(off + n); err != nil {
		return nil, err
	}
	return s.buf[off-s.pos : off-s.pos+n], nil
}

func (s *streamSrc) skip(off, n int64) error { return s.fill(off + n) }

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

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// cBytes returns b up to its first NUL.
func cBytes(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b
}

// cString returns b up to its first NUL.
func cString(b []byte) string { return string(cBytes(b)) }

// tarChecksum checks a header's checksum: the sum of its bytes with the
// checksum field read as spaces, unsigned or (as old tars wrote it)
// signed.
func tarChecksum(h []byte) error {
	want, err := tarNumber(h[148:156])
	if err != nil {
		return fmt.Errorf("checksum field: %v", err)
	}
	// The checksum field counts as eight spaces.
	u := unsignedSum(h[:tarBlock]) - unsignedSum(h[148:156]) + 8*' '
	if want == u {
		return nil
	}
	// Some old tar programs summed signed bytes.
	var s int64 = 8 * ' '
	for i, c := range h[:tarBlock] {
		if i < 148 || i >= 156 {
			s += int64(int8(c))
		}
	}
	if want != s {
		return fmt.Errorf("header checksum mismatch: stored %d, computed %d", want, u)
	}
	return nil
}

// unsignedSum is the sum of the bytes of b, eight at a time: a header
// checksum byte by byte took a quarter of a warm epoch's daemon CPU for
// samples of small members.
func unsignedSum(b []byte) int64 {
	const lanes = 0x00ff00ff00ff00ff
	var sum int64
	for len(b) >= 8 {
		// Up to 128 words per round: each 16-bit lane then holds at most
		// 256 bytes' worth, 65280.
		var acc uint64
		n := min(len(b)/8, 128)
		for i := range n {
			w := binary.LittleEndian.Uint64(b[8*i:])
			acc += w&lanes + (w>>8)&lanes
		}
		acc = acc&0x0000ffff0000ffff + (acc>>16)&0x0000ffff0000ffff
		sum += int64(acc&0xffffffff + acc>>32)
		b = b[8*n:]
	}
	for _, c := range b {
		sum += int64(c)
	}
	return sum
}

// tarNumber parses a numeric header field: octal text, or GNU base-256
// when its first byte has the high bit set.
func tarNumber(f []byte) (int64, error) {
	if len(f) > 0 && f[0]&0x80 != 0 {
		if f[0] == 0xff {
			return 0, errors.New("negative base-256 number")
		}
		v := int64(f[0] & 0x7f)
		for _, c := range f[1:] {
			if v > (1<<62)>>8 {
				return 0, errors.New("base-256 number too large")
			}
			v = v<<8 | int64(c)
		}
		return v, nil
	}
	s := strings.Trim(string(f), " \x00")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 8, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an octal number", f)
	}
	return v, nil
}

// parsePAX reads the path and size records of a pax extended header:
// path is nil and size unchanged when it has none.
func parsePAX(d []byte, size int64) (path []byte, _ int64, _ error) {
	for len(d) > 0 {
		sp := bytes.IndexByte(d, ' ')
		if sp <= 0 {
			return path, size, errors.New("malformed record")
		}
		n, err := strconv.Atoi(string(d[:sp]))
		if err != nil || n <= sp+1 || n > len(d) || d[n-1] != '\n' {
			return path, size, errors.New("malformed record length")
		}
		k, v, ok := bytes.Cut(d[sp+1:n-1], []byte{'='})
		if !ok {
			return path, size, errors.New("record without '='")
		}
		switch string(k) {
		case "path":
			path = v
		case "size":
			if size, err = strconv.ParseInt(string(v), 10, 64); err != nil || size < 0 {
				return path, size, fmt.Errorf("bad size %q", v)
			}
		}
		d = d[n:]
	}
	return path, size, nil
}
