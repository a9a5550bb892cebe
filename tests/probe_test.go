package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/api"
	"github.com/minio/minio-go/v7"
)

func readProbeConfig(t *testing.T, m *mount) api.Config {
	t.Helper()
	var cfg api.Config
	raw, err := os.ReadFile(api.ConfigPath(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A mount indexed by probing serves, byte for byte, the parts of a mount
// of the same directory indexed in full (corgipile, K = 1 and 3, two
// epochs), and its config.json says the record count is not known.
// Strategies that need every record refuse --index probe, naming
// --index full.
func TestProbeMountServesTheBytesOfAFullMount(t *testing.T) {
	src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
	flags := []string{"--seed", "11", "--parts", "3", "--block-size", "16KiB"}
	full := startMount(t, src, append(flags, "--index", "full")...)
	probed := startMount(t, src, append(flags, "--index", "probe")...)
	fp, pp := readAll(t, full), readAll(t, probed)
	for key, b := range fp {
		if !bytes.Equal(b, pp[key]) {
			t.Fatalf("part %s (epoch/part/K): %d bytes from the probed mount differ from %d bytes from the full one", key, len(pp[key]), len(b))
		}
	}
	fc, pc := readProbeConfig(t, full), readProbeConfig(t, probed)
	if fc.Dataset.Index != "full" || pc.Dataset.Index != "probe" || pc.Dataset.Records != nil || !strings.Contains(strings.Join(pc.Dataset.Unknown, ","), "records") || pc.Dataset.Bytes != fc.Dataset.Bytes {
		t.Fatalf("config.json: full %+v, probed %+v; want index full and probe, the probed records null and unknown, equal bytes", fc.Dataset, pc.Dataset)
	}
	for _, args := range [][]string{{"--strategy", "full"}, {"--strategy", "window"}, {"--equal-parts", "--parts", "2"}} {
		_, stderr, code := run(append([]string{"order", src, "--seed", "1", "--index", "probe", "--cache-dir", t.TempDir()}, args...)...)
		if code == 0 || !strings.Contains(stderr, "--index full") {
			t.Fatalf("order --index probe %v: exit %d, stderr:\n%s\nwant an error naming --index full", args, code, stderr)
		}
	}
}

// Through a real S3 server, a mount probes by default and serves the
// bytes of a full mount of the local copy; when one object is replaced,
// the next mount probes that object alone (the log names it and no
// other) and serves the bytes of a full mount of the changed copy.
func TestS3MountProbesByDefaultAndReprobesOnlyAReplacedObject(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
	s.upload("data", "probe", src)
	cache := filepath.Join(t.TempDir(), "cache")
	flags := []string{"--seed", "13", "--parts", "3", "--block-size", "16KiB"}
	remoteFlags := append(flags[:len(flags):len(flags)], "--s3-endpoint", s.endpoint, "--cache-dir", cache)
	local := startMount(t, src, flags...)
	remote := startMount(t, "s3://data/probe", remoteFlags...)
	if cfg := readProbeConfig(t, remote); cfg.Dataset.Index != "probe" {
		t.Fatalf("an s3:// mount indexed with %q by default, want probe", cfg.Dataset.Index)
	}
	lp, rp := readAll(t, local), readAll(t, remote)
	for key, b := range lp {
		if !bytes.Equal(b, rp[key]) {
			t.Fatalf("part %s (epoch/part/K): %d bytes from the probed S3 mount differ from %d bytes of the full local mount", key, len(rp[key]), len(b))
		}
	}
	remote.stop()
	local.stop()

	// Replace one object with another file's records: other bytes, size
	// and ETag.
	names, err := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if err != nil || len(names) != 4 {
		t.Fatalf("source files %v, %v", names, err)
	}
	replaced := filepath.Base(names[2])
	other := genSynthetic(t, 500, 16, 4, 1, "clustered")
	others, _ := filepath.Glob(filepath.Join(other, "*.tfrecord"))
	b, err := os.ReadFile(others[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(names[2], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.PutObject(context.Background(), "data", "probe/"+replaced, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	local = startMount(t, src, flags...)
	remote = startMount(t, "s3://data/probe", remoteFlags...)
	log, ok := remote.logHas("probing it again, alone", replaced)
	if !ok {
		t.Fatalf("no log line says %s alone is probed again:\n%s", replaced, log)
	}
	for i, n := range names {
		if base := filepath.Base(n); i != 2 && strings.Contains(log, "file=s3://data/probe/"+base) {
			t.Fatalf("the log names unchanged %s as probed again:\n%s", base, log)
		}
	}
	lp, rp = readAll(t, local), readAll(t, remote)
	for key, b := range lp {
		if !bytes.Equal(b, rp[key]) {
			t.Fatalf("after the replacement, part %s (epoch/part/K): %d bytes from S3 differ from %d bytes of the full local mount", key, len(rp[key]), len(b))
		}
	}
}

// TestProbedMountStatsShowTheRecordsLearnedAsBlocksLoad: a probed index
// learns its record counts as blocks load, and stats.json says how far:
// after a whole epoch is read, every block and every record. A mount of a
// full index, which knows every count, has no such counters.
func TestProbedMountStatsShowTheRecordsLearnedAsBlocksLoad(t *testing.T) {
	const n = 1000
	src := genSynthetic(t, n, 16, 4, 2, "clustered")
	flags := []string{"--seed", "11", "--block-size", "16KiB"}
	stats := func(m *mount) api.Stats { return m.stats() }
	probed := startMount(t, src, append(flags, "--index", "probe")...)
	probed.read(0, 0, 1)
	var cfg api.Config
	raw, err := os.ReadFile(api.ConfigPath(probed.dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg.Dataset.Blocks < 2 {
		t.Fatalf("config.json: %v, dataset.blocks %d\n%s", err, cfg.Dataset.Blocks, raw)
	}
	if s := stats(probed); s.RecordsLearned == nil || *s.RecordsLearned != n || s.BlocksLearned == nil || *s.BlocksLearned != int64(cfg.Dataset.Blocks) {
		t.Errorf("probed mount after a whole epoch: stats.json blocks_learned %v, records_learned %v; want %d and %d", deref(s.BlocksLearned), deref(s.RecordsLearned), cfg.Dataset.Blocks, n)
	}
	full := startMount(t, src, append(flags, "--index", "full")...)
	full.read(0, 0, 1)
	if s := stats(full); s.RecordsLearned != nil || s.BlocksLearned != nil {
		t.Errorf("a full index's stats.json has learned counts: blocks_learned %v, records_learned %v", deref(s.BlocksLearned), deref(s.RecordsLearned))
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
