package formats

import "fmt"

// RecordLimiter is implemented by the scanners that hold a whole record in
// memory to find its end (the text formats: lines, CSV rows): LimitRecord
// lowers the longest record they hold, and so what a record without an end
// (a line of gigabytes in a small compressed file) costs before it is
// refused. It must be called before the first Next.
type RecordLimiter interface {
	LimitRecord(n int64)
}

// LongRecordError is the error of a scanner that found no record end
// within its limit. It unwraps to the *CorruptError that says where.
type LongRecordError struct {
	Corrupt *CorruptError
	Max     int64 // the limit, in bytes
}

func (e *LongRecordError) Error() string { return e.Corrupt.Error() }
func (e *LongRecordError) Unwrap() error { return e.Corrupt }

// LimitRecord implements RecordLimiter: the scanner's buffer grows to at
// most n bytes (and never past maxCutRecord).
func (s *cutScanner) LimitRecord(n int64) {
	s.max = max(64, min(n, maxCutRecord))
	s.sc.Buffer(make([]byte, 0, min(s.max, s.initial)), int(s.max))
}

// tooLong is the error of a record of the scan longer than s.max.
func (s *cutScanner) tooLong() error {
	return &LongRecordError{Max: s.max, Corrupt: &CorruptError{Offset: s.off,
		Reason: fmt.Sprintf("%s %d: longer than %d bytes (no line end?)", s.label, s.n+1, s.max)}}
}
