//go:build linux

package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// withoutSeconds drops every field whose name says it is a time: the rest
// of a validate report is a pure function of the data and the flags.
func withoutSeconds(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if strings.Contains(strings.ToLower(k), "second") {
				delete(v, k)
				continue
			}
			v[k] = withoutSeconds(x)
		}
	case []any:
		for i, x := range v {
			v[i] = withoutSeconds(x)
		}
	}
	return v
}

// withoutMountSource drops, from each run's mount_config, what says where
// the data came from and how it was indexed (the source's name, and the
// dataset summary that a probed S3 index leaves partly unknown): the
// training figures and the chosen sizes must still be equal.
func withoutMountSource(v any) any {
	r, _ := v.(map[string]any)
	runs, _ := r["runs"].([]any)
	for _, run := range runs {
		if c, ok := run.(map[string]any)["mount_config"].(map[string]any); ok {
			delete(c, "source")
			delete(c, "dataset")
		}
	}
	return v
}

func TestS3ValidateGivesTheSameReportAsTheLocalDirectory(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 3000, 16, 4, 3, "clustered")
	test := genSynthetic(t, 500, 16, 4, 1, "shuffled")
	s.upload("data", "train", src)
	cache := filepath.Join(t.TempDir(), "cache")
	for _, via := range []string{"direct", "mount"} {
		t.Run(via, func(t *testing.T) {
			report := func(data string, extra ...string) any {
				out := filepath.Join(t.TempDir(), "report.json")
				corgifs(t, append([]string{"validate", "--data", data, "--test", test, "--via", via, "--epochs", "2",
					"--strategies", "corgipile,none", "--seed", "5", "--block-size", "16KiB", "--cache-dir", cache, "--json", out}, extra...)...)
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				var v any
				if err := json.Unmarshal(b, &v); err != nil {
					t.Fatal(err)
				}
				return withoutMountSource(withoutSeconds(v))
			}
			local := report(src)
			remote := report("s3://data/train", "--s3-endpoint", s.endpoint)
			if !reflect.DeepEqual(local, remote) {
				l, _ := json.Marshal(local)
				r, _ := json.Marshal(remote)
				t.Fatalf("validate of s3://data/train differs from validate of the same files on disk:\nlocal %s\nS3    %s", l, r)
			}
		})
	}
}

func TestS3TunePrintsABlockSizeAndConcurrencyForABucket(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 3000, 16, 4, 3, "clustered")
	s.upload("data", "train", src)
	out := corgifs(t, "tune", "s3://data/train", "--s3-endpoint", s.endpoint, "--s3-concurrency", "8", "--label", "label",
		"--min-block", "16KiB", "--max-block", "64KiB", "--probe-time", "1s", "--probe-bytes", "1MiB", "--rounds", "1",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--json")
	var v struct {
		Storage struct {
			Remote      bool  `json:"remote"`
			Recommended int64 `json:"recommended"`
			Concurrency int   `json:"concurrency"`
			Sizes       []struct {
				MBps float64 `json:"mb_per_s"`
			} `json:"sizes"`
		} `json:"storage"`
		BlockSize int64 `json:"block_size"`
		Data      *struct {
			Records int64 `json:"records"`
		} `json:"data"`
		Mount string `json:"mount"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	st := v.Storage
	if !st.Remote || len(st.Sizes) != 3 || st.Recommended < 16<<10 || st.Recommended > 64<<10 || v.BlockSize != st.Recommended {
		t.Fatalf("want a remote probe of 16, 32 and 64 KiB recommending one of them as the block size:\n%s", out)
	}
	for _, sz := range st.Sizes {
		if sz.MBps <= 0 {
			t.Fatalf("a size measured no throughput:\n%s", out)
		}
	}
	if st.Concurrency < 1 || st.Concurrency > 8 {
		t.Fatalf("recommended --s3-concurrency %d, want 1 to the 8 probed:\n%s", st.Concurrency, out)
	}
	if v.Data == nil || v.Data.Records != 3000 {
		t.Fatalf("the data analysis read from the bucket should see all 3000 records:\n%s", out)
	}
	if !strings.HasPrefix(v.Mount, "corgifs mount s3://data/train MNT") || !strings.Contains(v.Mount, "--s3-concurrency") {
		t.Fatalf("mount line %q: want a mount of s3://data/train with --s3-concurrency", v.Mount)
	}
}

func TestS3ValidateAndTuneFailClearlyOnAnUnreachableEndpoint(t *testing.T) {
	test := genSynthetic(t, 100, 8, 2, 1, "shuffled")
	t.Setenv("AWS_ACCESS_KEY_ID", s3Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3Secret)
	t.Setenv("AWS_REGION", "us-east-1")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	cache := filepath.Join(t.TempDir(), "cache")
	for name, args := range map[string][]string{
		"validate": {"validate", "--data", "s3://data/train", "--test", test, "--via", "direct", "--epochs", "1", "--cache-dir", cache},
		"tune":     {"tune", "s3://data/train", "--cache-dir", cache},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			cmd := exec.Command(bin, append(args, "--s3-endpoint", dead, "--s3-timeout", "2s")...)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err == nil {
				t.Fatalf("%s exited 0 with an unreachable endpoint\n%s", name, out.String())
			}
			if want := "cannot reach the S3 endpoint " + dead; !strings.Contains(out.String(), want) {
				t.Fatalf("%s's error does not say %q:\n%s", name, want, out.String())
			}
		})
	}
}

// s3Counters are the source counters of stats.json, and the loader's
// figures they must agree with.
type s3Counters struct {
	BlocksRead int64 `json:"blocks_read"`
	BytesRead  int64 `json:"bytes_read"`
	// The reads of the record-chain walks that prove a probed index's
	// boundaries: GETs too.
	ProofReads int64 `json:"proof_reads"`
	ProofBytes int64 `json:"proof_bytes"`
	Source     *struct {
		Requests  int64 `json:"requests"`
		GETs      int64 `json:"gets"`
		GETBytes  int64 `json:"get_bytes"`
		Retries   int64 `json:"retries"`
		Throttled int64 `json:"throttled"`
		Changed   int64 `json:"changed"`
		Failed    int64 `json:"failed"`
	} `json:"source"`
}

func readS3Counters(t *testing.T, m *mount) s3Counters {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, ".corgifs", "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c s3Counters
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Source == nil {
		t.Fatalf("stats.json of an s3:// mount has no \"source\" counters:\n%s", b)
	}
	return c
}

func TestS3StatsCountGETsThrottlingRetriesAndReplacedObjects(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 2000, 16, 4, 2, "clustered")
	s.upload("data", "counted", src)
	p := startProxy(t, s.addr, time.Minute)
	p.only = 2 // with faults on, every new connection answers 503 SlowDown
	m := startMount(t, "s3://data/counted", "--seed", "5", "--block-size", "16KiB", "--parts", "2",
		"--s3-endpoint", p.endpoint(), "--s3-timeout", "5s")

	// A part read with no fault: one GET per run of adjacent blocks read
	// (one a block for blocks apart), their bytes (the index, built at
	// mount, read every object before), and one per read of the walks
	// that prove the probed boundaries.
	c0 := readS3Counters(t, m)
	if c0.Source.GETBytes < c0.BytesRead || c0.Source.Requests < c0.Source.GETs {
		t.Fatalf("at mount: source %+v, loader %d bytes", *c0.Source, c0.BytesRead)
	}
	if _, err := os.ReadFile(m.part(0, 0, 2)); err != nil {
		t.Fatal(err)
	}
	// The read prefetches the next epoch's first buffers: the counters
	// agree once those loads are done, and stay.
	var c, last s3Counters
	var gets, bytesGot int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		c = readS3Counters(t, m)
		gets, bytesGot = c.Source.GETs-c0.Source.GETs-(c.ProofReads-c0.ProofReads), c.Source.GETBytes-c0.Source.GETBytes-(c.ProofBytes-c0.ProofBytes)
		still := last.Source != nil && *c.Source == *last.Source && c.BlocksRead == last.BlocksRead && c.BytesRead == last.BytesRead && c.ProofReads == last.ProofReads
		if still && bytesGot == c.BytesRead-c0.BytesRead || time.Now().After(deadline) {
			break
		}
		last = c
	}
	if gets < 1 || gets > c.BlocksRead-c0.BlocksRead || bytesGot != c.BytesRead-c0.BytesRead || c.Source.Retries != 0 || c.Source.Throttled != 0 || c.Source.Failed != 0 {
		t.Fatalf("a fault-free read made %d GETs of %d bytes besides the proofs' (source %+v, proof reads %d); the loader read %d blocks, %d bytes: want at most one GET a block, their bytes, no retry",
			gets, bytesGot, *c.Source, c.ProofReads-c0.ProofReads, c.BlocksRead-c0.BlocksRead, c.BytesRead-c0.BytesRead)
	}

	// The other part's blocks, never loaded, while every request gets 503.
	p.setFaults(true)
	if _, err := os.ReadFile(m.part(0, 1, 2)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read while every request gets 503: %v, want EIO", err)
	}
	p.setFaults(false)
	c = readS3Counters(t, m)
	if served := p.faults[2].Load(); c.Source.Throttled != served || served == 0 {
		t.Fatalf("the proxy answered 503 %d times; stats.json counts %d throttled", served, c.Source.Throttled)
	}
	if c.Source.Failed < 1 || c.Source.Retries < 4*c.Source.Failed {
		t.Fatalf("source %+v: want failed reads, each tried 5 times (4 retries)", *c.Source)
	}

	// Both objects replaced: the next GETs are refused as changed.
	for _, f := range []string{"data-00000-of-00002.tfrecord", "data-00001-of-00002.tfrecord"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 1
		if _, err := s.client.PutObject(context.Background(), "data", "counted/"+f, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Source.Changed
	if _, err := os.ReadFile(m.part(0, 1, 2)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of replaced objects: %v, want EIO", err)
	}
	if c = readS3Counters(t, m); c.Source.Changed <= before {
		t.Fatalf("source %+v: want the GETs of replaced objects counted as changed", *c.Source)
	}
}
