package tests

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/corgifs/corgifs/api"
)

// Through a real S3 server: a probed mount that reads an epoch whole
// learns every record count, and keeps them in its cache directory; the
// next mount of the same objects knows them at mount (config.json's
// records and counts_kept_files), serves its buffers while they load
// (stats.json's buffers_served_loading; the first mount, which learns the
// counts, never can) and serves the same bytes for every epoch and part.
// An object re-uploaded with other content is not given the counts kept
// for the old one: the mount after it knows the others' alone, serves the
// bytes of a full mount of the changed copy, and keeps the new object's,
// which the mount after that knows.
func TestS3ProbedRemountKnowsTheRecordCountsAnEarlierMountLearnedAndServesBuffersWhileTheyLoad(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 6000, 16, 4, 4, "clustered")
	s.upload("data", "counts", src)
	cache := filepath.Join(t.TempDir(), "cache")
	flags := []string{"--seed", "17", "--block-size", "16KiB", "--buffer", "128KiB", "--prefetch", "1"}
	remote := append(slices.Clone(flags), "--s3-endpoint", s.endpoint, "--cache-dir", cache)
	counts := func(m *mount) api.Dataset { return readProbeConfig(t, m).Dataset }

	first := startMount(t, "s3://data/counts", remote...)
	if d := counts(first); d.Index != "probe" || d.Records != nil || d.CountsKept != 0 {
		t.Fatalf("first mount's config.json: index %q, records %v, counts_kept_files %d; want probe, null, 0", d.Index, d.Records, d.CountsKept)
	}
	fp := readAll(t, first)
	d1 := counts(first)
	s1 := first.stats()
	if s1.BlocksLearned == nil || *s1.BlocksLearned != int64(d1.Blocks) {
		t.Fatalf("first mount learned %v of %d blocks' counts", deref(s1.BlocksLearned), d1.Blocks)
	}
	if s1.BuffersServedLoading != 0 {
		t.Fatalf("first mount served %d buffers while they loaded, without knowing their counts", s1.BuffersServedLoading)
	}
	if d1.Blocks < 16 {
		t.Fatalf("only %d blocks: the test needs several buffers", d1.Blocks)
	}
	first.stop()

	second := startMount(t, "s3://data/counts", remote...)
	d2 := counts(second)
	if d2.Records == nil || *d2.Records != *s1.RecordsLearned || d2.CountsKept != 4 || slices.Contains(d2.Unknown, "records") {
		t.Fatalf("second mount's config.json: records %v, counts_kept_files %d, unknown %v; want %d records known from the 4 files' kept counts", deref(d2.Records), d2.CountsKept, d2.Unknown, *s1.RecordsLearned)
	}
	if log, ok := second.logHas("record counts known from an earlier mount"); !ok {
		t.Fatalf("the second mount's log does not say its counts were known from an earlier mount:\n%s", log)
	}
	sp := readAll(t, second)
	for key, b := range fp {
		if !bytes.Equal(b, sp[key]) {
			t.Fatalf("part %s (epoch/part/K): %d bytes of the remount that knew the counts differ from %d bytes of the mount that learned them", key, len(sp[key]), len(b))
		}
	}
	s2 := second.stats()
	if s2.BuffersServedLoading == 0 || s2.BlocksLearned != nil || s2.ProofReads != 0 {
		t.Fatalf("second mount: %d buffers served while they loaded (want some), blocks_learned %v (want none: every count known), %d record-chain reads (want 0)", s2.BuffersServedLoading, deref(s2.BlocksLearned), s2.ProofReads)
	}
	second.stop()

	// One object re-uploaded with another dataset's records: other
	// bytes, size and ETag.
	names, err := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if err != nil || len(names) != 4 {
		t.Fatalf("source files %v, %v", names, err)
	}
	replaced := filepath.Base(names[1])
	other := genSynthetic(t, 2000, 16, 4, 1, "clustered")
	others, _ := filepath.Glob(filepath.Join(other, "*.tfrecord"))
	b, err := os.ReadFile(others[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(names[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.PutObject(context.Background(), "data", "counts/"+replaced, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	third := startMount(t, "s3://data/counts", remote...)
	d3 := counts(third)
	if d3.Records != nil || d3.CountsKept != 3 {
		t.Fatalf("after %s was replaced: config.json records %v, counts_kept_files %d; want null and 3 (the replaced object's counts not known)", replaced, deref(d3.Records), d3.CountsKept)
	}
	local := startMount(t, src, append(slices.Clone(flags), "--index", "full")...)
	lp, tp := readAll(t, local), readAll(t, third)
	for key, b := range lp {
		if !bytes.Equal(b, tp[key]) {
			t.Fatalf("after the replacement, part %s (epoch/part/K): %d bytes from the S3 mount differ from %d bytes of a full mount of the changed copy", key, len(tp[key]), len(b))
		}
	}
	if s3 := third.stats(); s3.BlocksLearned == nil || *s3.BlocksLearned != int64(d3.Blocks) {
		t.Fatalf("after the replacement: %v of %d blocks' counts learned after reading every part", deref(s3.BlocksLearned), d3.Blocks)
	}
	third.stop()
	if d := counts(startMount(t, "s3://data/counts", remote...)); d.Records == nil || d.CountsKept != 4 {
		t.Fatalf("the mount after the replaced object's counts were learned: records %v, counts_kept_files %d; want every count known", deref(d.Records), d.CountsKept)
	}
}
