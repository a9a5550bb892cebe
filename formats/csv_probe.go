package formats

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ErrProbeAmbiguous is returned by a probe that cannot be certain of the
// record boundary near its offset from the bytes it may read there. The
// index builder then scans that file whole.
var ErrProbeAmbiguous = errors.New("no record boundary is certain near the offset")

// What a CSV probe reads when the window after its offset does not
// settle it: from csvProbeBack before its offset, and at most
// csvProbeLimit bytes in all (a few GETs of a remote file) before it
// gives up and the file is scanned whole.
const (
	csvProbeBack  = probeWindow
	csvProbeLimit = 1 << 20
)

// Probe finds the first row start at or after off, when the bytes within
// about 1 MiB of off make it certain; else it returns ErrProbeAmbiguous.
//
// Why it can be wrong to just take the next newline: a newline ends a row
// only outside quotes, and whether a byte is inside a quoted field depends
// on every quote before it. A stretch with no quote at all says nothing:
// it may lie in one long quoted field (`"` + megabytes of plain lines +
// `"`) as well as between quoted fields, so no rule that looks at a
// window alone can probe a file without quotes.
//
// The rule here runs every hypothesis. The rows are cut by a small
// automaton (csvStep) that accepts every file the full scan accepts and
// ends a row exactly where cutCSV does. Starting at a point a before off
// (the file's first row start when it is near, which fixes the state),
// it runs one copy of the automaton from each of its states. Let T be the
// state the full parse from Head.Start is in at a: T is among the copies,
// and since the file is valid T never reaches a syntax error, so the copy
// from T is alive at every later byte and records the true first row end
// at or after off-1. A copy that meets a syntax error (a bare quote, text
// after a closing quote, a quoted field open at the end of the file) was
// not T and is dropped; two copies in the same state at the same byte
// have the same future and are merged when they found the same boundary.
// The probe answers only when every copy still alive has found a boundary
// and they all found the same one: the copy from T is among them, so that
// is the true boundary. Copies that disagree can only be told apart by a
// later syntax error, so it reads on, and gives up after csvProbeLimit
// bytes. In practice the wrong hypotheses die at the first quoted field
// met (a field's opening quote, taken for a closing one, is followed by
// text), so files with quoted fields probe and files without quotes fall
// back to a full scan.
//
// A file that is not valid CSV near off may have every copy die (the
// probe gives up: the full scan then reports the damage) or keep a wrong
// one alive; the loader's split of the block finds the bad row then.
func (CSV) Probe(r io.ReaderAt, h Head, off int64) (int64, error) {
	// Most files with quotes settle within a few rows after off: first
	// one window from there (one read, as the line probe), then the
	// whole allowance, from before off.
	if c, err := probeCSV(r, h, off, 0, probeWindow); !errors.Is(err, ErrProbeAmbiguous) {
		return c, err
	}
	return probeCSV(r, h, off, csvProbeBack, csvProbeLimit)
}

// The states of csvStep, before a byte: at the start of a field (and of
// a row), in an unquoted field, in a quoted field, just after a quote in
// a quoted field (a closing quote, or the first of ""), and after a
// closing quote and "\r".
const (
	csvField uint8 = iota
	csvPlain
	csvQuoted
	csvQuote
	csvQuoteCR
	csvDead
)

// csvStep returns the state after byte c and whether c ends a row. It
// follows cutQuotedCSV (encoding/csv without LazyQuotes).
func csvStep(s uint8, c byte) (next uint8, rowEnd bool) {
	switch s {
	case csvField, csvPlain:
		switch c {
		case ',':
			return csvField, false
		case '\n':
			return csvField, true
		case '"':
			if s == csvField {
				return csvQuoted, false
			}
			return csvDead, false // bare quote in an unquoted field
		}
		return csvPlain, false
	case csvQuoted:
		if c == '"' {
			return csvQuote, false
		}
		return csvQuoted, false
	case csvQuote:
		switch c {
		case '"':
			return csvQuoted, false // ""
		case ',':
			return csvField, false
		case '\n':
			return csvField, true
		case '\r':
			return csvQuoteCR, false
		}
		return csvDead, false // text after a closing quote
	case csvQuoteCR:
		if c == '\n' {
			return csvField, true
		}
	}
	return csvDead, false
}

// csvHyp is one copy of the automaton: its state, and the first row start
// at or after the probe's offset it has found (-1: none yet).
type csvHyp struct {
	state uint8
	found int64
}

// csvPlainByte reports whether c leaves every state but csvQuote and
// csvQuoteCR as it is (csvField becomes csvPlain), so that a run of such
// bytes acts as its first byte does.
func csvPlainByte(c byte) bool { return c != '"' && c != ',' && c != '\n' && c != '\r' }

// probeCSV is Probe with the look-back and the read limit as parameters,
// so that tests can make the hypotheses matter on small inputs.
func probeCSV(r io.ReaderAt, h Head, off, back, limit int64) (int64, error) {
	if off <= h.Start {
		return h.Start, nil
	}
	if off >= h.End {
		return h.End, nil
	}
	a := max(h.Start, off-1-back) // the byte at off-1 may end a row
	hyps := []csvHyp{{csvField, -1}}
	if a > h.Start {
		hyps = []csvHyp{{csvField, -1}, {csvPlain, -1}, {csvQuoted, -1}, {csvQuote, -1}, {csvQuoteCR, -1}}
	}
	stop := min(h.End, max(a+limit, off+1))
	var buf []byte
	chunk := off + probeWindow - a
	for at := a; at < stop; {
		n := min(chunk, stop-at)
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		k, err := r.ReadAt(b, at)
		if int64(k) < n {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("probe at offset %d: %w", at, err)
		}
		for i := 0; i < len(b); i++ {
			c := b[i]
			p := at + int64(i)
			event := false
			for j := range hyps {
				hp := &hyps[j]
				next, end := csvStep(hp.state, c)
				hp.state = next
				if next == csvDead {
					event = true
				} else if end && hp.found < 0 && p >= off-1 {
					hp.found, event = p+1, true
				}
			}
			if event || len(hyps) > 1 {
				hyps = mergeCSVHyps(hyps)
			}
			if event {
				if len(hyps) == 0 {
					return 0, fmt.Errorf("probe at offset %d: no reading of the bytes from offset %d to %d is valid CSV: %w", off, a, p+1, ErrProbeAmbiguous)
				}
				if cut, ok := csvAgreed(hyps); ok {
					return cut, nil
				}
			}
			if csvPlainByte(c) {
				// The plain bytes that follow change no state.
				if j := bytes.IndexAny(b[i+1:], "\",\n\r"); j >= 0 {
					i += j
				} else {
					i = len(b) - 1
				}
			}
		}
		at += n
		chunk *= 2
	}
	if stop == h.End {
		// At the end of the records a quoted field must be closed, and the
		// last row ends there.
		live := hyps[:0]
		for _, hp := range hyps {
			if hp.state == csvQuoted {
				continue
			}
			if hp.found < 0 {
				hp.found = h.End
			}
			live = append(live, hp)
		}
		if cut, ok := csvAgreed(live); ok {
			return cut, nil
		}
		if len(live) == 0 {
			return 0, fmt.Errorf("probe at offset %d: no reading of the bytes from offset %d to the end is valid CSV: %w", off, a, ErrProbeAmbiguous)
		}
	}
	return 0, fmt.Errorf("probe at offset %d: quoting leaves the row start ambiguous from offset %d to %d: %w", off, a, stop, ErrProbeAmbiguous)
}

// mergeCSVHyps drops the dead copies and merges the ones that are in the
// same state and found the same boundary: their futures are the same.
func mergeCSVHyps(hyps []csvHyp) []csvHyp {
	out := hyps[:0]
	for _, hp := range hyps {
		if hp.state != csvDead && !slices.Contains(out, hp) {
			out = append(out, hp)
		}
	}
	return out
}

// csvAgreed returns the boundary every copy found, if they all found one
// and the same.
func csvAgreed(hyps []csvHyp) (int64, bool) {
	if len(hyps) == 0 || hyps[0].found < 0 {
		return 0, false
	}
	for _, hp := range hyps[1:] {
		if hp.found != hyps[0].found {
			return 0, false
		}
	}
	return hyps[0].found, true
}
