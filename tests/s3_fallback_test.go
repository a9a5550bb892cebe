package tests

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gzipCopy writes a copy of the TFRecord files of src gzipped under their
// own names, as TensorFlow writes GZIP TFRecord files: no .gz ending, so
// only the magic bytes say they are compressed.
func gzipCopy(t *testing.T, src string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no TFRecord files in %s: %v", src, err)
	}
	dst := filepath.Join(t.TempDir(), "gzipped")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(b)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(n)), z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// summaryField is the value of one line of corgifs index's summary.
func summaryField(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			return f[1]
		}
	}
	return ""
}

// When --index probe falls back to a full index (a gzip TFRecord file
// found by its magic bytes cannot be probed), the summary of corgifs index
// says the index is full: the mode built, not the one asked for.
func TestIndexSummarySaysFullWhenAProbeFellBackToAFullIndex(t *testing.T) {
	src := gzipCopy(t, genSynthetic(t, 400, 8, 2, 2, "clustered"))
	out := corgifs(t, "index", src, "--index", "probe", "--cache-dir", t.TempDir())
	if got := summaryField(out, "index"); got != "full" {
		t.Fatalf("index of gzip TFRecord files with --index probe says index %q, want full (the probe fell back):\n%s", got, out)
	}
	plain := corgifs(t, "index", genSynthetic(t, 400, 8, 2, 2, "clustered"), "--index", "probe", "--cache-dir", t.TempDir())
	if got := summaryField(plain, "index"); got != "probe" {
		t.Fatalf("index of plain TFRecord files with --index probe says index %q, want probe:\n%s", got, plain)
	}
}

// A bucket of gzip TFRecord files without a .gz ending, mounted with the
// s3:// default --index probe, falls back to a full index (config.json
// says full) and serves the bytes of a mount of the same files from a
// local directory.
func TestS3GzipTFRecordWithoutAGzNameFallsBackToAFullIndexAndServesTheLocalBytes(t *testing.T) {
	s := startS3(t)
	src := gzipCopy(t, genSynthetic(t, 1500, 16, 4, 2, "clustered"))
	s.upload("data", "tfgzip", src)
	flags := []string{"--seed", "17", "--parts", "3", "--block-size", "16KiB"}
	local := startMount(t, src, flags...)
	remote := startMount(t, "s3://data/tfgzip", append(flags, "--s3-endpoint", s.endpoint)...)
	if cfg := readProbeConfig(t, remote); cfg.Dataset.Index != "full" || cfg.Dataset.Records == nil {
		t.Fatalf("config.json of an s3:// mount of gzip TFRecord files: %+v, want index full with records known", cfg.Dataset)
	}
	lp, rp := readAll(t, local), readAll(t, remote)
	for key, b := range lp {
		if len(b) == 0 || !bytes.Equal(b, rp[key]) {
			t.Fatalf("part %s (epoch/part/K): %d bytes from S3 differ from %d bytes of the local mount", key, len(rp[key]), len(b))
		}
	}
}
