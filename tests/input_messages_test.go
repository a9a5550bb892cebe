package tests

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/internal/testenv"
)

// epochRecords reads epoch 0 of the mount m in one part and returns the
// hashes of its records, sorted.
func epochRecords(t *testing.T, m *mount) [][32]byte {
	t.Helper()
	return sortedHashes(hashes(frames(t, m.read(0, 0, 1))))
}

// TestPzstdFileIsServedUnderCompressionAuto: pzstd (which the README
// recommends, for its many frames) starts every file with a skippable
// frame, not a zstd frame; --compression auto (the default) must take it
// as zstd, by the .zst name and by its magic bytes alike, and serve every
// record of the decompressed copy once.
func TestPzstdFileIsServedUnderCompressionAuto(t *testing.T) {
	if _, err := exec.LookPath("pzstd"); err != nil {
		testenv.Missing(t, "pzstd is not installed (Debian package zstd)")
	}
	plain := genSynthetic(t, 800, 24, 4, 2, "clustered")
	names, _ := filepath.Glob(filepath.Join(plain, "*.tfrecord"))
	src := filepath.Join(t.TempDir(), "src")
	os.Mkdir(src, 0o755)
	for i, n := range names {
		// One file named .zst, one that keeps its name (found by magic).
		out := filepath.Join(src, filepath.Base(n)+[]string{".zst", ""}[i%2])
		if b, err := shell(`pzstd -q -p 2 -c "$1" > "$2"`, n, out).CombinedOutput(); err != nil {
			t.Fatalf("pzstd: %v\n%s", err, b)
		}
		if head, _ := os.ReadFile(out); len(head) < 4 || head[0]&0xf0 != 0x50 || !bytes.Equal(head[1:4], []byte{0x2a, 0x4d, 0x18}) {
			t.Fatalf("%s does not start with a skippable frame: % x", out, head[:min(len(head), 4)])
		}
	}
	m := startMount(t, src, "--compression", "auto", "--block-size", "16KiB", "--seed", "3")
	if got, want := epochRecords(t, m), sortedHashes(sourceRecords(t, plain)); !slices.Equal(got, want) {
		t.Fatalf("epoch 0 serves %d records, not each of the %d of the decompressed copy once", len(got), len(want))
	}
}

// TestZstdLongWindowIsRefusedNamingTheWindowTheLimitAndTheRemedy: zstd
// --long=31 writes frames that need a 2 GiB window, which corgifs does not
// decode; the refusal names the file, the window, the limit and how to
// recompress, instead of a bare "window size exceeded".
func TestZstdLongWindowIsRefusedNamingTheWindowTheLimitAndTheRemedy(t *testing.T) {
	if _, err := exec.LookPath("zstd"); err != nil {
		testenv.Missing(t, "zstd is not installed (Debian package zstd)")
	}
	plain := genSynthetic(t, 200, 8, 2, 1, "clustered")
	names, _ := filepath.Glob(filepath.Join(plain, "*.tfrecord"))
	src := t.TempDir()
	out := filepath.Join(src, "data.tfrecord.zst")
	// From a pipe, the size unknown: zstd keeps the 2 GiB window.
	if b, err := shell(`zstd -q --long=31 -c < "$1" > "$2"`, names[0], out).CombinedOutput(); err != nil {
		t.Fatalf("zstd --long=31: %v\n%s", err, b)
	}
	_, stderr, code, _ := runTimed(t, time.Minute, "index", src, "--cache-dir", t.TempDir())
	for _, want := range []string{out, "zstd frame at byte 0 needs a window of 2.0 GiB (window log 31, as zstd --long=31 writes)",
		"more than the 128 MiB (window log 27, zstd --long's default) corgifs decodes",
		"recompress the file without --long, or with --long=27 or less"} {
		if code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, want a refusal saying %q:\n%s", code, want, stderr)
		}
	}
}

// TestDiskCacheOwnedByAnotherUserIsRefusedNamingDiskCache: the refusal of
// a --disk-cache directory someone else owns names --disk-cache and the
// directory, not --cache-dir and the index (the cache directory is fine).
func TestDiskCacheOwnedByAnotherUserIsRefusedNamingDiskCache(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, to give a directory to another user")
	}
	src := genSynthetic(t, 100, 8, 2, 1, "clustered")
	dc := filepath.Join(t.TempDir(), "dc")
	if err := os.Mkdir(dc, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dc, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, stderr, code, _ := runTimed(t, time.Minute, "mount", src, t.TempDir(), "--cache-dir", t.TempDir(), "--disk-cache", dc)
	i := slices.IndexFunc(strings.Split(stderr, "\n"), func(l string) bool { return strings.Contains(l, "is owned by uid 65534") })
	if code == 0 || i < 0 {
		t.Fatalf("exit %d, want a refusal saying %s is owned by uid 65534:\n%s", code, dc, stderr)
	}
	line := strings.Split(stderr, "\n")[i]
	if !strings.Contains(line, "--disk-cache: unsafe cache directory: directory "+dc+" is owned by uid 65534, not by uid 0 that runs corgifs") ||
		!strings.Contains(line, "use a directory that you own and only you can write") {
		t.Errorf("refusal %q: want it to name --disk-cache, %s and the remedy", line, dc)
	}
	for _, wrong := range []string{"--cache-dir", "index"} {
		if strings.Contains(line, wrong) {
			t.Errorf("refusal %q names %s", line, wrong)
		}
	}
}

// TestGzipZeroPaddingBetweenAndAfterMembersIsAccepted: zero bytes after a
// gzip member are padding (gzip(1) ignores them at the end, "trailing
// zeros"; Python's gzip module skips them before another member): a file
// padded so is served as its decompressed copy, every record once.
func TestGzipZeroPaddingBetweenAndAfterMembersIsAccepted(t *testing.T) {
	plain := genSynthetic(t, 600, 24, 4, 1, "clustered")
	names, _ := filepath.Glob(filepath.Join(plain, "*.tfrecord"))
	data, err := os.ReadFile(names[0])
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	for i, piece := range [][]byte{data[:len(data)/3], data[len(data)/3 : 2*len(data)/3], data[2*len(data)/3:]} {
		w := gzip.NewWriter(&file)
		w.Write(piece)
		w.Close()
		file.Write(make([]byte, []int{7, 1000, 512}[i])) // between the members, and after the last
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "data.tfrecord.gz"), file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, src, "--block-size", "16KiB", "--seed", "5")
	if got, want := epochRecords(t, m), sortedHashes(sourceRecords(t, plain)); !slices.Equal(got, want) {
		t.Fatalf("epoch 0 serves %d records, not each of the %d of the decompressed copy once\n%s", len(got), len(want), m.log)
	}
}
