//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/source/s3"
)

// The probe section (issue 14 item 4): the index of a TFRecord dataset in
// an S3 server, built by probing at every block edge against reading every
// byte. The server is versitygw on 127.0.0.1 serving a directory of this
// machine's disk; the page cache is dropped before each build (as root),
// so both read from the disk through the server. The bytes and GETs are
// counted by a wrapper of the S3 source. From the probe's time per block
// edge it extrapolates the time to probe 10 TB.

const probeHeading = "## Probe index against full index from S3 (issue 14)"

const (
	probeAccess = "corgifs-bench-access"
	probeSecret = "corgifs-bench-secret-key"
	probeBlock  = 8 << 20
	tenTB       = 10e12
)

// countingSource counts the bytes and the reads (GETs) of a source.
type countingSource struct {
	source.Source
	bytes, reads atomic.Int64
}

func (c *countingSource) Open(path, version string) (source.File, error) {
	f, err := c.Source.Open(path, version)
	if err != nil {
		return nil, err
	}
	return &countingFile{File: f, c: c}, nil
}

type countingFile struct {
	source.File
	c *countingSource
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.c.bytes.Add(int64(n))
	f.c.reads.Add(1)
	return n, err
}

// probeRun is one index build.
type probeRun struct {
	secs         float64
	bytes, reads int64
	blocks       int
}

type probeResult struct {
	ds          *dataset
	objects     int
	full, probe []probeRun
	same        bool
	dropped     bool
}

// runProbe runs the section on each --record-sizes dataset.
func runProbe(ctx context.Context, o options, work string, stdout *os.File) ([]*probeResult, error) {
	gw, err := exec.LookPath("versitygw")
	if err != nil {
		return nil, fmt.Errorf("no versitygw S3 server on PATH (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
	}
	var out []*probeResult
	for _, rs := range o.recordSizes {
		dir := filepath.Join(work, datasetDir(rs))
		ds, err := ensureDataset(ctx, dir, o.size, rs, os.Stderr)
		if err != nil {
			return nil, err
		}
		res, err := probeDataset(ctx, o, gw, dir, ds)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ds.label(), err)
		}
		out = append(out, res)
	}
	return out, nil
}

func probeDataset(ctx context.Context, o options, gw, dir string, ds *dataset) (*probeResult, error) {
	root := filepath.Join(dir, "s3")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.CommandContext(ctx, gw, "--port", addr, "--access", probeAccess, "--secret", probeSecret, "--quiet", "posix", root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	cl, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(probeAccess, probeSecret, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := cl.ListBuckets(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("versitygw did not answer: %w", err)
		}
	}
	// Upload, unless the bucket holds the dataset already.
	if ok, _ := cl.BucketExists(ctx, "bench"); !ok {
		if err := cl.MakeBucket(ctx, "bench", minio.MakeBucketOptions{}); err != nil {
			return nil, err
		}
	}
	have := map[string]int64{}
	for obj := range cl.ListObjects(ctx, "bench", minio.ListObjectsOptions{Prefix: "data/", Recursive: true}) {
		if obj.Err != nil {
			return nil, obj.Err
		}
		have[obj.Key] = obj.Size
	}
	start := time.Now()
	for _, p := range ds.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		key := "data/" + filepath.Base(p)
		if have[key] == fi.Size() {
			continue
		}
		if _, err := cl.FPutObject(ctx, "bench", key, p, minio.PutObjectOptions{}); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(os.Stderr, "the dataset is in s3://bench/data on versitygw at %s (uploads took %s)\n", addr, time.Since(start).Round(time.Second))

	os.Setenv("AWS_ACCESS_KEY_ID", probeAccess)
	os.Setenv("AWS_SECRET_ACCESS_KEY", probeSecret)
	os.Setenv("AWS_SESSION_TOKEN", "")
	os.Setenv("AWS_REGION", "us-east-1")
	src, err := s3.New(ctx, "s3://bench/data", s3.Config{Endpoint: "http://" + addr, PathStyle: true})
	if err != nil {
		return nil, err
	}
	res := &probeResult{ds: ds, objects: len(ds.paths())}
	var fullIx, probeIx *index.Index
	build := func(probe bool) (probeRun, *index.Index, error) {
		if err := dropCaches(); err == nil {
			res.dropped = true
		}
		cs := &countingSource{Source: src}
		start := time.Now()
		ix, err := index.Build(ctx, cs, index.Options{BlockSize: probeBlock, Format: formats.TFRecord{}, Probe: probe})
		if err != nil {
			return probeRun{}, nil, err
		}
		r := probeRun{secs: time.Since(start).Seconds(), bytes: cs.bytes.Load(), reads: cs.reads.Load(), blocks: len(ix.Blocks)}
		what := "full "
		if probe {
			what = "probe"
		}
		fmt.Fprintf(os.Stderr, "  %s index: %.2f s, %s read in %d GETs, %d blocks\n", what, r.secs, humanize.IBytes(uint64(r.bytes)), r.reads, r.blocks)
		return r, ix, nil
	}
	for range o.runs {
		r, ix, err := build(false)
		if err != nil {
			return nil, fmt.Errorf("full index: %w", err)
		}
		res.full, fullIx = append(res.full, r), ix
		r, ix, err = build(true)
		if err != nil {
			return nil, fmt.Errorf("probe index: %w", err)
		}
		res.probe, probeIx = append(res.probe, r), ix
	}
	res.same = slices.EqualFunc(fullIx.Blocks, probeIx.Blocks, func(a, b index.Block) bool {
		return a.File == b.File && a.Offset == b.Offset && a.Len == b.Len
	})
	if !res.same {
		return res, errors.New("the probed index cuts other blocks than the full index")
	}
	return res, nil
}

func median(runs []probeRun, f func(probeRun) float64) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return summarize(v).med
}

func probeCommand(o options) string {
	return fmt.Sprintf("go run ./bench --probe --size %s --record-sizes %s --runs %d", formatSize(o.size), (*sizesValue)(&o.recordSizes).String(), o.runs)
}

func probeMarkdown(o options, results []*probeResult, took time.Duration, m machine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", probeHeading)
	fmt.Fprintf(&b, "`%s`, %s, on %s. The index of a TFRecord dataset of %d objects in versitygw on 127.0.0.1 (serving this machine's disk), built with %s blocks by reading every byte (`--index full`) and by probing at every block edge (`--index probe`), %d runs each, alternating", probeCommand(o), time.Now().UTC().Format("2006-01-02"), m.cpu, dataFiles, humanize.IBytes(probeBlock), o.runs)
	if len(results) > 0 && results[0].dropped {
		b.WriteString(", the page cache dropped before each.\n\n")
	} else {
		b.WriteString("; not root, so the page cache was not dropped.\n\n")
	}
	b.WriteString("| dataset | full index | probe index | faster | bytes read, full | bytes read, probe | GETs, full | GETs, probe | probe GETs/s | blocks | 10 TB, probe | 10 TB, full |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fs := median(r.full, func(p probeRun) float64 { return p.secs })
		ps := median(r.probe, func(p probeRun) float64 { return p.secs })
		fb := median(r.full, func(p probeRun) float64 { return float64(p.bytes) })
		pb := median(r.probe, func(p probeRun) float64 { return float64(p.bytes) })
		fr := median(r.full, func(p probeRun) float64 { return float64(p.reads) })
		pr := median(r.probe, func(p probeRun) float64 { return float64(p.reads) })
		scale := tenTB / float64(r.ds.Bytes)
		fmt.Fprintf(&b, "| %s, %s | %.2f s | %.3f s | %.1f× | %s | %s (%.1f%%) | %.0f | %.0f | %.0f | %d | %s | %s |\n",
			r.ds.label(), humanize.IBytes(uint64(r.ds.Bytes)), fs, ps, fs/ps, humanize.IBytes(uint64(fb)), humanize.IBytes(uint64(pb)), 100*pb/fb,
			fr, pr, pr/ps, r.probe[0].blocks, (time.Duration(ps*scale) * time.Second).Round(time.Second), (time.Duration(fs*scale) * time.Second).Round(time.Second))
	}
	fmt.Fprintf(&b, "\nThe probed and the full index cut the same blocks (checked). The 10 TB columns scale each time by the bytes (%.0f probes of one GET for 10 TB of %s blocks), at this server's latency and throughput; the load average was %s. A probe is one small GET, so its time is the server's cost per request (and the network's latency), while the full index streams every byte: the ratio depends on how the two compare, which on a loopback server sharing two busy cores is far from an object store across a network.\n",
		tenTB/probeBlock, humanize.IBytes(probeBlock), loadAverage())
	fmt.Fprintf(&b, "\nThe section took %s.\n", took.Round(time.Second))
	return b.String()
}
