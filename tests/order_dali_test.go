package tests

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestOrderDaliIndexTilesTheServedPart checks `corgifs order --format dali`,
// the index DALI's readers.tfrecord takes (index_path): one 'offset size'
// line per record, which must tile the served part file exactly, frame by
// frame, with and without --equal-parts.
func TestOrderDaliIndexTilesTheServedPart(t *testing.T) {
	src := genSynthetic(t, 5000, 8, 4, 3, "clustered")
	for _, equal := range []bool{false, true} {
		t.Run(fmt.Sprintf("equal-parts=%v", equal), func(t *testing.T) {
			flags := []string{"--block-size", "16KiB", "--buffer", "10%", "--seed", "5"}
			if equal {
				flags = append(flags, "--equal-parts")
			}
			m := startMount(t, src, append(flags, "--parts", "3")...)
			cache := t.TempDir()
			for _, ep := range []int{0, 2} {
				for part := range 3 {
					served := m.read(ep, part, 3)
					n := len(frames(t, served))
					args := append([]string{"order", src, "--epoch", strconv.Itoa(ep), "--part", strconv.Itoa(part), "--parts", "3",
						"--cache-dir", cache}, flags...)
					dali := strings.Split(strings.TrimSpace(corgifs(t, append(args, "--format", "dali")...)), "\n")
					plain := strings.Split(strings.TrimSpace(corgifs(t, args...)), "\n")
					if len(dali) != n || len(plain) != n {
						t.Fatalf("epoch %d part %d: %d dali lines, %d file lines, %d records served", ep, part, len(dali), len(plain), n)
					}
					at := int64(0)
					for i, l := range dali {
						f := strings.Fields(l)
						if len(f) != 2 {
							t.Fatalf("line %q: want 'offset size'", l)
						}
						off, err1 := strconv.ParseInt(f[0], 10, 64)
						size, err2 := strconv.ParseInt(f[1], 10, 64)
						if err1 != nil || err2 != nil || off != at {
							t.Fatalf("epoch %d part %d record %d: line %q, want offset %d", ep, part, i, l, at)
						}
						if off+16 > int64(len(served)) || int64(binary.LittleEndian.Uint64(served[off:]))+16 != size {
							t.Fatalf("epoch %d part %d record %d: line %q is not the frame served at that offset", ep, part, i, l)
						}
						if g := strings.Fields(plain[i]); len(g) != 3 || g[2] != f[1] {
							t.Fatalf("record %d: dali size %s, file format line %q", i, f[1], plain[i])
						}
						at += size
					}
					if at != int64(len(served)) {
						t.Fatalf("epoch %d part %d: the index covers %d bytes, the part has %d", ep, part, at, len(served))
					}
				}
			}
		})
	}
	if _, stderr, code := run("order", src, "--seed", "1", "--output", "csv", "--cache-dir", t.TempDir()); code == 0 || !strings.Contains(stderr, "want file or dali") {
		t.Errorf("--output csv: exit %d, %q", code, stderr)
	}
	// --format names the records' format; on TFRecord files, csv finds none.
	if _, stderr, code := run("order", src, "--seed", "1", "--format", "csv", "--cache-dir", t.TempDir()); code == 0 || !strings.Contains(stderr, "no files matching *.csv") {
		t.Errorf("--format csv on TFRecord files: exit %d, %q", code, stderr)
	}
}
