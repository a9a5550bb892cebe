package formats

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Prober is implemented by formats where a record boundary can be found
// near any offset by reading a little there, so that a dataset can be
// indexed without reading it all (blockcache's probe index). A probe that
// cannot be certain near an offset (CSV, whose quotes decide which
// newlines end rows) returns an error wrapping ErrProbeAmbiguous, and the
// file is scanned whole.
//
// TFRecord and tar probes take bytes that look like a record start when
// they are confirmed by what follows (the next frame header, the chain of
// tar headers). A payload that embeds whole frames or a whole tar archive
// can still fool them, so for these formats (Chainer) the loader serves a
// block only once the record chain from the file's start proves its
// boundaries.
type Prober interface {
	// Probe returns the first record boundary at or after off in a file
	// whose Head is h, the end of the file's records counting as one: off
	// itself if a record starts there, the end of the records if none
	// starts at or after off.
	Probe(r io.ReaderAt, h Head, off int64) (int64, error)
}

// Sizer is implemented by formats whose records all have one length,
// known from the file's Head: a probed index counts their records.
type Sizer interface {
	RecordLen(h Head) int64
}

func (f Fixed) RecordLen(h Head) int64 { return f.RecordSize }
func (NPY) RecordLen(h Head) int64     { return npyRowLen(h.Key) }

func (Lines) Probe(r io.ReaderAt, h Head, off int64) (int64, error)  { return probeLine(r, h, off) }
func (JSONL) Probe(r io.ReaderAt, h Head, off int64) (int64, error)  { return probeLine(r, h, off) }
func (LibSVM) Probe(r io.ReaderAt, h Head, off int64) (int64, error) { return probeLine(r, h, off) }

func (f Fixed) Probe(r io.ReaderAt, h Head, off int64) (int64, error) {
	return probeFixed(f.RecordSize, h, off), nil
}

func (NPY) Probe(r io.ReaderAt, h Head, off int64) (int64, error) {
	return probeFixed(npyRowLen(h.Key), h, off), nil
}

// probeWindow is what a probe reads at a time: large enough to hold a
// few records of most datasets, small next to a block.
const probeWindow = 64 << 10

// Probe finds the first confirmed frame at or after off, as the scanner's
// Resync does after damage: both its CRCs check, and it ends at the end of
// the file or is followed by a length whose CRC checks. A fake header
// planted in a payload fails the data CRC.
func (TFRecord) Probe(r io.ReaderAt, h Head, off int64) (int64, error) {
	if off <= h.Start {
		return h.Start, nil
	}
	if off >= h.End {
		return h.End, nil
	}
	// A larger window than the text probes': it holds the frame found,
	// whose data CRC is checked, and the next header, in one read (one
	// GET) for records up to about 200 KiB; longer ones take more reads.
	// An index reads less, in windows that follow its block size
	// (ProbeWithin).
	return TFRecord{}.ProbeWithin(r, h, off, ProbeWindow{First: 4 * probeWindow, Max: 4 * probeWindow})
}

func probeFixed(size int64, h Head, off int64) int64 {
	if off <= h.Start || size <= 0 {
		return h.Start
	}
	return min(h.End, h.Start+(off-h.Start+size-1)/size*size)
}

// probeLine finds the first line start at or after off: just after the
// first "\n" at or after off-1.
func probeLine(r io.ReaderAt, h Head, off int64) (int64, error) {
	return probeLineWithin(r, h, off, ProbeWindow{First: probeWindow, Max: probeWindow})
}

// probeLineWithin is probeLine with reads bounded by w.
func probeLineWithin(r io.ReaderAt, h Head, off int64, w ProbeWindow) (int64, error) {
	if off <= h.Start {
		return h.Start, nil
	}
	buf := make([]byte, max(1, w.First))
	for at := off - 1; at < h.End; {
		if at > off-1 && int64(len(buf)) < w.Max {
			buf = make([]byte, min(2*int64(len(buf)), w.Max))
		}
		n := min(int64(len(buf)), h.End-at)
		k, err := r.ReadAt(buf[:n], at)
		if int64(k) < n {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("probe at offset %d: %w", at, err)
		}
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return at + int64(i) + 1, nil
		}
		at += n
	}
	return h.End, nil
}

// maxTarBack bounds how far back from an offset a tar probe looks for a
// member header to walk from: past it, it walks from the start of the
// shard, reading every header.
const maxTarBack = 256 << 20

// Probe finds the first sample start at or after off: it looks back from
// off for a member header (a 512-aligned block with the ustar magic and a
// valid checksum, of a regular file with a key, whose name no extended
// header could have replaced) from which the chain of headers leads past off, and walks the
// members from there as the scanner does, so that a member starts a new
// sample when its key differs from the one before. Without such a header
// it walks from the start of the shard. Past the last sample, the end of
// the records is the end-of-archive marker.
func (WDS) Probe(r io.ReaderAt, h Head, off int64) (int64, error) {
	return WDS{}.ProbeWithin(r, h, off, ProbeWindow{First: probeWindow, Max: probeWindow})
}

// ProbeWithin is Probe reading chunks of at most w.Max bytes (a tar
// header is 512 bytes: one read a chunk, however far the walk goes).
func (WDS) ProbeWithin(r io.ReaderAt, h Head, off int64, w ProbeWindow) (int64, error) {
	src := &readerAtSrc{r: &chunkCache{r: r, end: h.End, size: max(tarBlock, min(probeWindow, w.Max))}, end: h.End}
	from := h.Start
	if off > h.Start {
		a, err := tarAnchor(src, h, off)
		if err != nil {
			return 0, err
		}
		from = a
	}
	sw := sampleWalker{off: from, start: from}
	for {
		had := sw.has
		m, cut, _, err := sw.step(src)
		if err != nil {
			return 0, fmt.Errorf("probe at offset %d: %w", off, err)
		}
		if m.eoa {
			return m.start, nil
		}
		// From the start of the shard, its first keyed member starts the
		// first sample; from an anchor, whose sample may have begun
		// before it, only a change of key does.
		if (cut || !had && sw.has && from == h.Start) && m.start >= off {
			return m.start, nil
		}
	}
}

// tarAnchor returns a member start before off to walk from, or h.Start.
func tarAnchor(src *readerAtSrc, h Head, off int64) (int64, error) {
	var nb []byte
	for q := (off - 1) / tarBlock * tarBlock; q > h.Start && off-q <= maxTarBack; q -= tarBlock {
		b, err := src.bytes(q, tarBlock)
		if err != nil {
			return 0, fmt.Errorf("probe at offset %d: %w", q, err)
		}
		// Cheap tests first: most blocks passed over are member data.
		// A header without the ustar magic (a V7 archive) is never an
		// anchor: the walk then starts further back, or at the start.
		if flag := b[156]; flag != '0' && flag != 0 && flag != '7' || string(b[257:262]) != "ustar" {
			continue
		}
		if tarChecksum(b) != nil {
			continue
		}
		// (cBytes never returns nil: an empty field is an empty slice.)
		if name := cBytes(b[:100]); len(name) == 0 || len(name) == 100 || len(cBytes(b[345:500])) != 0 || !isASCII(name) {
			continue // a name an extended header before it may have replaced
		}
		if _, ok := wdsKey(cBytes(b[:100]), b[156]); !ok {
			continue
		}
		// The chain from q must hold up to past off, or to the end of
		// the archive (off lies past the last sample: the walk from q
		// finds the end of the records). Rejecting the second, as this
		// did once, made a probe at the end of a shard try every header
		// back to the start, each walking to the end. A wrong anchor (an
		// archive inside a member) is caught when its block is loaded: the
		// record chain from the start of the shard proves every cut
		// (blockcache/probe_proof.go).
		ok := true
		for at := q; at < off; {
			m, err := nextMember(src, at, &nb)
			var ce *CorruptError
			if errors.As(err, &ce) {
				ok = false
				break
			}
			if err != nil {
				return 0, fmt.Errorf("probe at offset %d: %w", at, err)
			}
			if m.eoa {
				break
			}
			at = m.end
		}
		if ok {
			return q, nil
		}
	}
	return h.Start, nil
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// chunkCache reads its ReaderAt in aligned chunks of size bytes
// (probeWindow if 0) and keeps the last few, so that walking tar headers
// 512 bytes at a time makes one read per chunk (one GET of an object
// store).
type chunkCache struct {
	r      io.ReaderAt
	end    int64 // never read past it: an object store fails a range past the end
	size   int64
	chunks [4]struct {
		off  int64
		data []byte
	}
	next int
}

func (c *chunkCache) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		at := off + int64(n)
		size := c.size
		if size <= 0 {
			size = probeWindow
		}
		base := at / size * size
		var data []byte
		for i := range c.chunks {
			if ch := &c.chunks[i]; ch.data != nil && ch.off == base {
				data = ch.data
				break
			}
		}
		if data == nil {
			ch := &c.chunks[c.next]
			c.next = (c.next + 1) % len(c.chunks)
			if int64(cap(ch.data)) < size {
				ch.data = make([]byte, size)
			}
			k, err := c.r.ReadAt(ch.data[:max(0, min(size, c.end-base))], base)
			if k == 0 {
				ch.data = ch.data[:0]
				if err == nil {
					err = io.ErrUnexpectedEOF
				}
				return n, err
			}
			ch.off, ch.data = base, ch.data[:k]
			data = ch.data
		}
		i := at - base
		if i >= int64(len(data)) {
			return n, io.EOF
		}
		n += copy(p[n:], data[i:])
	}
	return n, nil
}
