package zaccess

import (
	"bytes"
	"compress/gzip"
	"errors"
	"testing"
)

// TestGzipZeroPaddingIsSkippedButNotWhatFollowsIt: zeros after a member
// are padding, at the end and before another member; anything else after
// them is still refused, at its offset.
func TestGzipZeroPaddingIsSkippedButNotWhatFollowsIt(t *testing.T) {
	member := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.Bytes()
	}
	a, b := member("hello "), member("world")
	padded := append(append(append(append([]byte{}, a...), make([]byte, 100)...), b...), make([]byte, 3)...)
	ix, err := Build(bytes.NewReader(padded), int64(len(padded)), Gzip, 1, nil)
	if err != nil || ix.Size != int64(len("hello world")) {
		t.Fatalf("zero-padded members: %+v, %v; want 11 bytes of output", ix, err)
	}
	bad := append(append(append([]byte{}, a...), make([]byte, 10)...), 'x', 'y')
	_, err = Build(bytes.NewReader(bad), int64(len(bad)), Gzip, 1, nil)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Offset != int64(len(a)+10) {
		t.Fatalf("garbage after padding: %v, want a FormatError at byte %d", err, len(a)+10)
	}
}

// TestSkippableFrameSniffsAsZstd: pzstd's files start with a skippable
// frame, of any of the 16 magic numbers.
func TestSkippableFrameSniffsAsZstd(t *testing.T) {
	for m := byte(0x50); m <= 0x5f; m++ {
		if k, ok := Sniff([]byte{m, 0x2a, 0x4d, 0x18, 4, 0, 0, 0}); !ok || k != Zstd {
			t.Errorf("skippable magic %#x: %v %v, want zstd", m, k, ok)
		}
	}
	if _, ok := Sniff([]byte{0x60, 0x2a, 0x4d, 0x18}); ok {
		t.Error("0x184D2A60 sniffed as compressed")
	}
}
