package tests

// Issue 12, items 2, 17 and 18: what the index takes from the source. A
// damaged record's payload never becomes records, a path past PATH_MAX does
// not fail the index, and a file with two names is served once per epoch.

import (
	"fmt"
	"github.com/corgifs/corgifs/internal/testtree"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSkipCorruptNeverServesAFrameEmbeddedInADamagedRecord(t *testing.T) {
	embedded := []byte("EMBEDDED: a record that never existed on its own")
	payload := append(append([]byte("payload before the frame "), frame(uint64(len(embedded)), embedded)...), " and after it"...)
	bad := frame(uint64(len(payload)), payload)
	bad[0] ^= 0x21 // the length: its CRC fails, and the data CRC with it
	good1, good2 := records("a", 10, 60), records("c", 10, 60)
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(good1, bad, good2))
	var want [][32]byte
	for _, b := range [][]byte{good1, good2} {
		want = append(want, hashes(frames(t, b))...)
	}

	m := startMount(t, src, "--skip-corrupt", "--seed", "1")
	for e := range 2 {
		got := frames(t, m.read(e, 0, 1))
		for _, r := range got {
			if strings.Contains(string(r), "EMBEDDED") {
				t.Fatalf("epoch %d served the frame embedded in the damaged record: %q", e, r)
			}
		}
		if !slices.Equal(sortedHashes(hashes(got)), sortedHashes(want)) {
			t.Errorf("epoch %d served %d records, want the %d intact ones exactly once", e, len(got), len(want))
		}
	}
	if log, ok := m.logHas(fmt.Sprintf("from=%d to=%d", len(good1), len(good1)+len(bad))); !ok {
		t.Errorf("the log does not report the damaged record as one range [%d,%d):\n%s", len(good1), len(good1)+len(bad), log)
	}
}

func TestPathLongerThanPathMaxIsSkippedNamingItAndTheRestIndexed(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "a.tfrecord"), records("a", 10, 60))
	file, inDir := testtree.DeepTree(t, src, records("deep", 5, 60))
	for _, flags := range [][]string{nil, {"--follow-symlinks"}} {
		out, stderr, code, _ := runTimed(t, 60*time.Second, append([]string{"index", src, "--cache-dir", t.TempDir()}, flags...)...)
		if code != 0 {
			t.Fatalf("index %v with a path past PATH_MAX: exit %d\n%.2000s", flags, code, stderr)
		}
		if !strings.Contains(out, "files       1\n") || !strings.Contains(out, "records     10\n") {
			t.Errorf("index %v:\n%s", flags, out)
		}
		for _, p := range []string{file, filepath.Dir(inDir)} {
			if !strings.Contains(stderr, p) || !strings.Contains(stderr, "PATH_MAX") {
				t.Errorf("index %v: stderr does not name %s as longer than PATH_MAX:\n%.2000s", flags, filepath.Base(p), stderr)
			}
		}
	}
}

func TestFileReachedTwiceIsServedOncePerEpoch(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	a, b := records("a", 30, 60), records("b", 20, 60)
	writeFile(t, filepath.Join(src, "a.tfrecord"), a)
	writeFile(t, filepath.Join(src, "sub", "b.tfrecord"), b)
	if err := os.Symlink("a.tfrecord", filepath.Join(src, "alias.tfrecord")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(src, "sub-alias")); err != nil {
		t.Fatal(err)
	}
	want := sortedHashes(hashes(append(frames(t, a), frames(t, b)...)))

	m := startMount(t, src, "--follow-symlinks", "--seed", "1", "--parts", "3")
	for e := range 2 {
		var got [][]byte
		for i := range 3 {
			got = append(got, frames(t, m.read(e, i, 3))...)
		}
		if hs := sortedHashes(hashes(got)); !slices.Equal(hs, want) {
			seen := map[[32]byte]int{}
			twice := 0
			for _, h := range hs {
				if seen[h]++; seen[h] == 2 {
					twice++
				}
			}
			t.Errorf("epoch %d: %d records served, %d of them more than once; want each of the %d once", e, len(got), twice, len(want))
		}
	}
	if log, ok := m.logHas("alias.tfrecord", "reached again"); !ok {
		t.Errorf("the log does not say which alias was skipped:\n%s", log)
	}
}
