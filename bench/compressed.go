//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/datagen"
)

const compressedHeading = "## Compressed sources: GZIP TFRecord from access points (issue 18)"

// compressedDefaultSize is the decompressed size of the compressed
// section's dataset when --size is not given.
const compressedDefaultSize = 1 << 30

// compressedResults is what the compressed section measured.
type compressedResults struct {
	plainBytes, gzBytes, sidecar int64
	points                       string // corgifs index's line on the access points
	files, records               int
	recordSize                   int64
	size                         int64     // asked for
	zcat, index, cold, warm      []float64 // seconds
	plainWarm                    []float64
	// CPU seconds of zcat, of corgifs index, and of the daemon over
	// each epoch.
	zcatCPU, indexCPU, coldCPU, warmCPU, plainWarmCPU []float64
	load                                              [2]string
}

// runCompressed writes a synthetic TFRecord dataset, gzip-compresses every
// file as TensorFlow's GZIP option would (the whole stream, named
// .tfrecord), and times, cold and warm: zcat of the files, `corgifs
// index`, and a corgipile epoch through corgifs; a warm epoch of the
// uncompressed copy for comparison.
func (h *harness) runCompressed(ctx context.Context, work string) (*compressedResults, error) {
	size := compressedDefaultSize
	if h.o.sizeSet {
		size = int(h.o.size)
	}
	const recordSize = 1 << 10
	dir := filepath.Join(work, "compressed-"+formatSize(int64(size)))
	plain, gz := filepath.Join(dir, "plain"), filepath.Join(dir, "gzip")
	features, records := shape(int64(size), recordSize)
	res := &compressedResults{records: records, recordSize: recordSize, size: int64(size)}
	s := datagen.Synthetic{Records: records, Features: features, Classes: dataClasses, Clustered: true, Files: dataFiles, Seed: dataSeed}
	done := filepath.Join(dir, "done")
	if _, err := os.Stat(done); err != nil {
		os.RemoveAll(dir)
		fmt.Fprintf(h.stderr, "compressed: writing %d records of %d features into %s\n", records, features, plain)
		if _, err := s.Write(ctx, plain, nil); err != nil {
			return nil, err
		}
		if err := gzipAll(ctx, plain, gz); err != nil {
			return nil, err
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return nil, err
		}
	}
	files, _ := filepath.Glob(filepath.Join(gz, "*"))
	res.files = len(files)
	for _, f := range files {
		fi, _ := os.Stat(f)
		res.gzBytes += fi.Size()
		pi, _ := os.Stat(filepath.Join(plain, filepath.Base(f)))
		if pi != nil {
			res.plainBytes += pi.Size()
		}
	}
	res.load[0] = loadAvg()
	e := &runEnv{harness: h, work: dir, ds: &dataset{dir: gz}}
	for run := range h.o.runs {
		// zcat, cold: one core decompressing, the files read from disk.
		if err := dropCaches(); err != nil {
			return nil, err
		}
		cpu0 := childCPU()
		t, err := timeCmd(ctx, nil, append([]string{"zcat"}, files...)...)
		if err != nil {
			return nil, err
		}
		res.zcat = append(res.zcat, t)
		res.zcatCPU = append(res.zcatCPU, childCPU()-cpu0)
		// corgifs index with a fresh cache, cold.
		cache := filepath.Join(dir, fmt.Sprintf("cache-%d", run))
		os.RemoveAll(cache)
		if err := dropCaches(); err != nil {
			return nil, err
		}
		cpu0 = childCPU()
		var out bytes.Buffer
		t, err = timeCmd(ctx, &out, h.bins.corgifs, "index", gz, "--cache-dir", cache)
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "compressed ") {
				res.points = strings.TrimSpace(strings.TrimPrefix(l, "compressed"))
			}
		}
		res.index = append(res.index, t)
		res.indexCPU = append(res.indexCPU, childCPU()-cpu0)
		res.sidecar = treeBytes(cache)
		// A cold corgipile epoch, then a warm one (the compressed files in
		// the page cache), through one mount.
		if err := dropCaches(); err != nil {
			return nil, err
		}
		d, err := e.mountCorgifs(ctx, fmt.Sprintf("gz-%d", run), cache, "--parts", "1")
		if err != nil {
			return nil, err
		}
		c0, _ := cpuSeconds(d.pid())
		t, err = timeCmd(ctx, nil, "cat", partPath(d.mnt, 0, 0, 1))
		if err == nil {
			c1, _ := cpuSeconds(d.pid())
			res.cold, res.coldCPU = append(res.cold, t), append(res.coldCPU, c1-c0)
			t, err = timeCmd(ctx, nil, "cat", partPath(d.mnt, 1, 0, 1))
			c2, _ := cpuSeconds(d.pid())
			res.warm, res.warmCPU = append(res.warm, t), append(res.warmCPU, c2-c1)
		}
		if serr := d.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return nil, err
		}
		// The uncompressed copy, warm.
		pe := &runEnv{harness: h, work: dir, ds: &dataset{dir: plain}}
		d, err = pe.mountCorgifs(ctx, fmt.Sprintf("plain-%d", run), filepath.Join(dir, "cache-plain"), "--parts", "1")
		if err != nil {
			return nil, err
		}
		if _, err = timeCmd(ctx, nil, "cat", partPath(d.mnt, 0, 0, 1)); err == nil {
			c0, _ := cpuSeconds(d.pid())
			t, err = timeCmd(ctx, nil, "cat", partPath(d.mnt, 1, 0, 1))
			c1, _ := cpuSeconds(d.pid())
			res.plainWarm, res.plainWarmCPU = append(res.plainWarm, t), append(res.plainWarmCPU, c1-c0)
		}
		if serr := d.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return nil, err
		}
	}
	res.load[1] = loadAvg()
	return res, nil
}

// gzipAll writes every file of src gzip-compressed (gzip -6, TensorFlow's
// zlib default) under the same name into dst, two at a time.
func gzipAll(ctx context.Context, src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	sem := make(chan struct{}, max(1, runtime.NumCPU()))
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.CommandContext(ctx, "sh", "-c", `gzip -6 -c "$1" > "$2"`, "sh", n, filepath.Join(dst, filepath.Base(n)))
			if out, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				first = cmp(first, fmt.Errorf("gzip %s: %w: %s", n, err, out))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// childCPU returns the user and system CPU seconds of the waited-for
// children so far.
func childCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// treeBytes is the total size of the regular files under dir.
func treeBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func (h *harness) compressedMarkdown(r *compressedResults, took time.Duration) string {
	var b strings.Builder
	gib := float64(r.plainBytes) / (1 << 30)
	rate := func(v []float64) string {
		d := summarize(v)
		return fmt.Sprintf("%.2f s (%.0f MiB/s)", d.med, float64(r.plainBytes)/(1<<20)/d.med)
	}
	fmt.Fprintf(&b, "A TFRecord dataset gzip-compressed as TensorFlow's GZIP option writes it (the whole stream, gzip -6,\n"+
		"named .tfrecord) is served through corgifs from access points, without a decompressed copy. MiB/s are of\n"+
		"decompressed bytes; medians of %d runs; cold runs follow a drop of the page cache.\n\n", h.o.runs)
	b.WriteString(reproduceIntro(took))
	fmt.Fprintf(&b, "    go run ./bench --warm=false --compressed --size %s --runs %d\n\n", formatSize(r.size), h.o.runs)
	b.WriteString(machineMarkdown(h.machine))
	fmt.Fprintf(&b, "- Dataset: %d records of about %d bytes, %d files, %.2f GiB decompressed, %.2f GiB gzip-compressed (ratio %.2f).\n",
		r.records, r.recordSize, r.files, gib, float64(r.gzBytes)/(1<<30), float64(r.gzBytes)/float64(r.plainBytes))
	b.WriteString(loadLine(r.load))
	b.WriteString("\n| measure | wall time (decompressed MiB/s) | CPU s | against |\n|---|---|---|---|\n")
	zc := summarize(r.zcat).med
	cpu := func(v []float64) string { return fmt.Sprintf("%.1f", summarize(v).med) }
	fmt.Fprintf(&b, "| zcat of the files, cold (one core) | %s | %s | |\n", rate(r.zcat), cpu(r.zcatCPU))
	fmt.Fprintf(&b, "| corgifs index, cold | %s | %s | %.2fx zcat's speed, %.2fx its CPU |\n", rate(r.index), cpu(r.indexCPU),
		zc/summarize(r.index).med, summarize(r.indexCPU).med/summarize(r.zcatCPU).med)
	fmt.Fprintf(&b, "| cold corgipile epoch, 1 part | %s | %s | %.2fx zcat's speed (target 1.5x) |\n", rate(r.cold), cpu(r.coldCPU), zc/summarize(r.cold).med)
	fmt.Fprintf(&b, "| warm corgipile epoch (compressed files cached) | %s | %s | %.2fx the uncompressed copy's time |\n", rate(r.warm), cpu(r.warmCPU), summarize(r.warm).med/summarize(r.plainWarm).med)
	fmt.Fprintf(&b, "| warm corgipile epoch of the uncompressed copy | %s | %s | |\n", rate(r.plainWarm), cpu(r.plainWarmCPU))
	fmt.Fprintf(&b, "| index sidecar, whole | %s | | %.2f%% of the compressed size |\n", fmtBytes(r.sidecar), 100*float64(r.sidecar)/float64(r.gzBytes))
	fmt.Fprintf(&b, "\nAccess points (`corgifs index`): %s; the target is about 1%%. The rest of the sidecar is the\n"+
		"index of any dataset (4 bytes a record of frame length, blocks).\n", r.points)
	return b.String()
}
