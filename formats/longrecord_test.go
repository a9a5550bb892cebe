package formats

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// A line longer than the limit set by LimitRecord is refused as a
// *LongRecordError that unwraps to the *CorruptError at the line's start,
// and the lines before it are found; one at the limit passes.
func TestLimitRecordRefusesALongerLineAtItsStart(t *testing.T) {
	const limit = 4096
	data := []byte("a\n" + strings.Repeat("x", limit-1) + "\n" + strings.Repeat("y", 3*limit) + "\nz\n")
	sc := JSONL{}.Scan(bytes.NewReader(data), Head{End: int64(len(data))}, 0, int64(len(data)))
	sc.(RecordLimiter).LimitRecord(limit)
	var n int
	for sc.Next() {
		n++
	}
	var le *LongRecordError
	var ce *CorruptError
	if !errors.As(sc.Err(), &le) || !errors.As(sc.Err(), &ce) {
		t.Fatalf("after %d lines: %v, want a *LongRecordError", n, sc.Err())
	}
	if n != 2 || le.Max != limit || ce.Offset != 2+limit || !strings.Contains(ce.Reason, "line 3: longer than 4096 bytes") {
		t.Errorf("%d lines found, then %v (max %d), want 2 lines, then line 3 at offset %d over %d bytes", n, sc.Err(), le.Max, 2+limit, limit)
	}
}
