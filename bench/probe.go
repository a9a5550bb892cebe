//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
)

// The probe section (issues 14 and 25): `corgifs index` of a TFRecord
// dataset in MinIO on 127.0.0.1, probing at every block edge against
// reading every byte, at the block size the sizing rule picks for the
// dataset from an object store (and at any --probe-block-sizes). Each
// build is a `corgifs index` process with an empty cache directory, the
// page cache dropped before it (as root), full and probe alternated. The
// GETs and bytes are the server's (its metrics) and the client's own
// count (the `requests` line of `corgifs index`); the CPU seconds are the
// server's and the client's, so that where the time goes is in the table.

const probeHeading = "## Probe index against full index from S3 (issues 14 and 25)"

const tenTB = 10e12

// probeRun is one index build.
type probeRun struct {
	secs              float64
	server            serverCounts // what the server counted
	clientCPU         float64      // the corgifs process's CPU seconds
	clientGETs, bytes int64        // its own count of ranged GETs and their bytes
	requests          int64        // every request it sent (listing included)
	blocks            int
	blockSize         string
	cacheDir          string
	mode              string
}

// probeCase is one block size: the defaults ("" given) or one given.
type probeCase struct {
	given       string // --block-size, "" for the defaults
	full, probe []probeRun
	same        bool
}

type probeResult struct {
	ds      *dataset
	objects int
	cases   []*probeCase
	dropped bool
	load    []string // load averages, before and after
}

// runProbe runs the section on each --record-sizes dataset.
func runProbe(ctx context.Context, o options, work, corgifs string) ([]*probeResult, error) {
	var out []*probeResult
	for _, rs := range o.recordSizes {
		dir := filepath.Join(work, datasetDir(rs))
		ds, err := ensureDataset(ctx, dir, o.size, rs, os.Stderr)
		if err != nil {
			return nil, err
		}
		res, err := probeDataset(ctx, o, corgifs, dir, ds)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ds.label(), err)
		}
		out = append(out, res)
	}
	return out, nil
}

func probeDataset(ctx context.Context, o options, corgifs, dir string, ds *dataset) (*probeResult, error) {
	srv, err := startMinIO(ctx, filepath.Join(dir, "minio"))
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	start := time.Now()
	if err := srv.upload(ctx, "bench", "data", ds.paths()); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "the dataset is in s3://bench/data on minio at %s (uploads took %s)\n", srv.addr, time.Since(start).Round(time.Second))

	res := &probeResult{ds: ds, objects: len(ds.paths()), load: []string{loadAverage()}}
	for _, bs := range append([]string{""}, o.probeBlocks...) {
		c := &probeCase{given: bs}
		res.cases = append(res.cases, c)
		for range o.runs {
			for _, mode := range []string{index.IndexFull, index.IndexProbe} {
				if err := dropCaches(); err == nil {
					res.dropped = true
				}
				r, err := indexRun(ctx, srv, corgifs, dir, mode, bs)
				if err != nil {
					return nil, err
				}
				if mode == index.IndexFull {
					c.full = append(c.full, r)
				} else {
					c.probe = append(c.probe, r)
				}
			}
		}
		same, err := sameBlocks(ctx, srv, c.full[len(c.full)-1], c.probe[len(c.probe)-1])
		if err != nil {
			return nil, err
		}
		if c.same = same; !same {
			return res, errors.New("the probed index cuts other blocks than the full index")
		}
		for _, r := range append(c.full, c.probe...) {
			os.RemoveAll(r.cacheDir)
		}
	}
	res.load = append(res.load, loadAverage())
	return res, nil
}

var (
	blocksLine   = regexp.MustCompile(`(?m)^blocks +(\d+) of about (.+)$`)
	requestsLine = regexp.MustCompile(`(?m)^requests +(\d+), of which (\d+) ranged GETs of .* \((\d+) bytes\)$`)
)

// indexRun times one `corgifs index` with an empty cache directory.
func indexRun(ctx context.Context, srv *minioServer, corgifs, dir, mode, blockSize string) (probeRun, error) {
	r := probeRun{mode: mode}
	var err error
	if r.cacheDir, err = os.MkdirTemp(dir, "cache-"); err != nil {
		return r, err
	}
	args := []string{"index", "s3://bench/data", "--s3-endpoint", srv.endpoint, "--cache-dir", r.cacheDir, "--index", mode}
	if blockSize != "" {
		args = append(args, "--block-size", blockSize)
	}
	cmd := exec.CommandContext(ctx, corgifs, args...)
	cmd.Env = srv.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	before, err := srv.counts(ctx)
	if err != nil {
		return r, err
	}
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("corgifs %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	r.secs = time.Since(start).Seconds()
	after, err := srv.counts(ctx)
	if err != nil {
		return r, err
	}
	r.server = after.sub(before)
	if u, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.clientCPU = float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
	}
	out := stdout.String()
	m := blocksLine.FindStringSubmatch(out)
	q := requestsLine.FindStringSubmatch(out)
	if m == nil || q == nil {
		return r, fmt.Errorf("corgifs %s printed no blocks or requests line:\n%s", strings.Join(args, " "), out)
	}
	r.blocks, _ = strconv.Atoi(m[1])
	r.blockSize = m[2]
	r.requests, _ = strconv.ParseInt(q[1], 10, 64)
	r.clientGETs, _ = strconv.ParseInt(q[2], 10, 64)
	r.bytes, _ = strconv.ParseInt(q[3], 10, 64)
	fmt.Fprintf(os.Stderr, "  %-5s index, %s blocks: %.2f s, %d blocks; server: %d GETs, %s sent, %s read from disk, %.2f CPU s; corgifs: %d GETs of %s, %d requests, %.2f CPU s\n",
		mode, r.blockSize, r.secs, r.blocks, r.server.gets, humanize.IBytes(uint64(r.server.sent)), humanize.IBytes(uint64(r.server.disk)), r.server.cpu,
		r.clientGETs, humanize.IBytes(uint64(r.bytes)), r.requests, r.clientCPU)
	return r, nil
}

// sameBlocks loads the indexes the two runs saved and reports whether
// they cut the same blocks.
func sameBlocks(ctx context.Context, srv *minioServer, full, probe probeRun) (bool, error) {
	setS3Env(minioAccess, minioSecret)
	load := func(r probeRun) (*index.Index, error) {
		c := mount.Defaults()
		c.Source, c.CacheDir, c.Index = "s3://bench/data", r.cacheDir, r.mode
		c.S3.Endpoint = srv.endpoint
		if r.blockSize != "" {
			bs, err := humanize.ParseBytes(r.blockSize)
			if err != nil {
				return nil, err
			}
			c.BlockSize = int64(bs)
		}
		d, err := mount.OpenIndex(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return nil, err
		}
		if !d.Cached {
			return nil, fmt.Errorf("the %s index in %s was built again, not loaded", r.mode, r.cacheDir)
		}
		return d.Index, nil
	}
	fi, err := load(full)
	if err != nil {
		return false, err
	}
	pi, err := load(probe)
	if err != nil {
		return false, err
	}
	return slices.EqualFunc(fi.Blocks, pi.Blocks, func(a, b index.Block) bool {
		return a.File == b.File && a.Offset == b.Offset && a.Len == b.Len
	}), nil
}

func median(runs []probeRun, f func(probeRun) float64) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return summarize(v).med
}

func spread(runs []probeRun, f func(probeRun) float64, format string) string {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	d := summarize(v)
	return fmt.Sprintf(format+" ("+format+"–"+format+")", d.med, d.lo, d.hi)
}

func probeCommand(o options) string {
	cmd := fmt.Sprintf("go run ./bench --probe --size %s --record-sizes %s --runs %d", formatSize(o.size), (*sizesValue)(&o.recordSizes).String(), o.runs)
	if len(o.probeBlocks) > 0 {
		cmd += " --probe-block-sizes " + strings.Join(o.probeBlocks, ",")
	}
	return cmd
}

func probeMarkdown(o options, results []*probeResult, took time.Duration, m machine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", probeHeading)
	fmt.Fprintf(&b, "`%s`, %s, on %s. `corgifs index` of a TFRecord dataset of %d objects in MinIO on 127.0.0.1 (serving this machine's disk), reading every byte (`--index full`) and probing at every block edge (`--index probe`), each a new process with an empty `--cache-dir`, %d runs each, alternating", probeCommand(o), time.Now().UTC().Format("2006-01-02"), m.cpu, dataFiles, o.runs)
	if len(results) > 0 && results[0].dropped {
		b.WriteString(", the page cache dropped before each.")
	} else {
		b.WriteString("; not root, so the page cache was not dropped.")
	}
	b.WriteString(" GETs and bytes: the server's (MinIO's metrics: GetObject requests, bytes sent), and in brackets corgifs's own count (`corgifs index`'s `requests` line: ranged GETs and their bytes). Medians, with min–max of the times.\n\n")
	b.WriteString("| dataset | blocks | full index | probe index | faster | GETs, full | GETs, probe | bytes, full | bytes, probe | server's disk reads, full / probe | server CPU, full / probe | corgifs CPU, full / probe | 10 TB, probe |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		for _, c := range r.cases {
			secs := func(p probeRun) float64 { return p.secs }
			fs, ps := median(c.full, secs), median(c.probe, secs)
			ratios := make([]float64, len(c.full))
			for i := range c.full {
				ratios[i] = c.full[i].secs / c.probe[i].secs
			}
			rd := summarize(ratios)
			gets := func(p probeRun) float64 { return float64(p.server.gets) }
			cgets := func(p probeRun) float64 { return float64(p.clientGETs) }
			sent := func(p probeRun) float64 { return float64(p.server.sent) }
			cbytes := func(p probeRun) float64 { return float64(p.bytes) }
			scpu := func(p probeRun) float64 { return p.server.cpu }
			disk := func(p probeRun) float64 { return float64(p.server.disk) }
			ccpu := func(p probeRun) float64 { return p.clientCPU }
			size := "the defaults: " + c.probe[0].blockSize
			if c.given != "" {
				size = "`--block-size " + c.given + "`"
			}
			pb := median(c.probe, sent)
			scale := tenTB / float64(r.ds.Bytes)
			fmt.Fprintf(&b, "| %s, %s | %d (%s) | %s s | %s s | %.1f× (%.1f–%.1f) | %.0f (%.0f) | %.0f (%.0f) | %s (%s) | %s (%s), %.2f%% | %s / %s | %.1f / %.1f s | %.1f / %.1f s | %s |\n",
				r.ds.label(), humanize.IBytes(uint64(r.ds.Bytes)), c.probe[0].blocks, size,
				spread(c.full, secs, "%.2f"), spread(c.probe, secs, "%.2f"), fs/ps, rd.lo, rd.hi,
				median(c.full, gets), median(c.full, cgets), median(c.probe, gets), median(c.probe, cgets),
				humanize.IBytes(uint64(median(c.full, sent))), humanize.IBytes(uint64(median(c.full, cbytes))),
				humanize.IBytes(uint64(pb)), humanize.IBytes(uint64(median(c.probe, cbytes))), 100*pb/float64(r.ds.Bytes),
				humanize.IBytes(uint64(median(c.full, disk))), humanize.IBytes(uint64(median(c.probe, disk))),
				median(c.full, scpu), median(c.probe, scpu), median(c.full, ccpu), median(c.probe, ccpu),
				(time.Duration(ps*scale) * time.Second).Round(time.Minute))
		}
	}
	fmt.Fprintf(&b, "\nThe probed and the full index cut the same blocks (checked by loading both). \"faster\" is the ratio of the medians, in brackets the range of the ratios of the runs paired in the order they ran. The 10 TB column scales the probe's time by the bytes, at this server's cost per request. The load average was %s before and %s after.\n", results[0].load[0], results[0].load[len(results[0].load)-1])
	fmt.Fprintf(&b, "\nThe section took %s.\n", took.Round(time.Second))
	return b.String()
}
