//go:build linux

// Command diskcache measures the disk cache of issue 14: a second epoch of
// an S3 dataset served from --disk-cache against a cold epoch of the same
// files mounted from a local directory (target: at least 0.9 times as
// fast), with the cold S3 epoch that filled the cache beside them.
//
// It writes a synthetic TFRecord dataset of about --size bytes with
// `corgifs gen synthetic`, starts versitygw (an S3 server serving a
// directory, `go install github.com/versity/versitygw/cmd/versitygw@v1.8.0`)
// on 127.0.0.1, uploads the files, and then --runs times: mounts the
// bucket with a fresh --disk-cache and reads epoch 0 (page cache dropped
// first), waits until every block fetched is written to the cache, drops
// the page cache and reads epoch 1; and mounts the local directory and
// reads its epoch 0 after dropping the page cache. Each read is `cat PART
// > /dev/null` of part 0 of 1, timed from start to exit. It prints a
// Markdown table of medians (min–max) and the counters of stats.json.
//
// Usage, as root (to drop the page cache), from the repository root:
//
//	go run ./bench/diskcache [--size 1GiB] [--runs 3] [--work DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/dustin/go-humanize"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	access = "corgifs-bench-access"
	secret = "corgifs-bench-secret-key"
)

func main() {
	size := flag.String("size", "1GiB", "dataset `size`")
	runs := flag.Int("runs", 3, "runs of each measurement")
	work := flag.String("work", "", "work `dir`ectory (default: a new one under /var/tmp, removed at the end)")
	flag.Parse()
	if err := run(*size, *runs, *work); err != nil {
		fmt.Fprintln(os.Stderr, "diskcache:", err)
		os.Exit(1)
	}
}

func run(sizeFlag string, runs int, work string) error {
	want, err := humanize.ParseBytes(sizeFlag)
	if err != nil {
		return fmt.Errorf("--size: %w", err)
	}
	if work == "" {
		if work, err = os.MkdirTemp("/var/tmp", "corgifs-diskcache-"); err != nil {
			return err
		}
		defer os.RemoveAll(work)
	}
	gw, err := exec.LookPath("versitygw")
	if err != nil {
		return fmt.Errorf("no versitygw on PATH (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
	}
	bin := filepath.Join(work, "corgifs")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/corgifs").CombinedOutput(); err != nil {
		return fmt.Errorf("build corgifs (run from the repository root): %v\n%s", err, out)
	}
	// Records of about 1 KiB: 256 float features.
	src := filepath.Join(work, "src")
	records := max(1000, int(want/1100))
	if out, err := exec.Command(bin, "gen", "synthetic", src, "--records", fmt.Sprint(records), "--features", "256",
		"--files", "16", "--seed", "3").CombinedOutput(); err != nil {
		return fmt.Errorf("gen: %v\n%s", err, out)
	}

	// The S3 server.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	s3dir := filepath.Join(work, "s3")
	if err := os.Mkdir(s3dir, 0o755); err != nil {
		return err
	}
	srv := exec.Command(gw, "--port", addr, "--access", access, "--secret", secret, "--quiet", "posix", s3dir)
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	if err := upload(addr, src); err != nil {
		return err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	os.Setenv("AWS_REGION", "us-east-1")

	var cold, cached, local []float64
	var st api.Stats
	for r := range runs {
		dc := filepath.Join(work, fmt.Sprintf("disk-cache-%d", r))
		m, err := mount(bin, work, "s3://data/set", "--s3-endpoint", "http://"+addr, "--disk-cache", dc)
		if err != nil {
			return err
		}
		t, err := timedEpoch(m, 0)
		if err != nil {
			m.stop()
			return err
		}
		cold = append(cold, t)
		if err := m.settled(); err != nil {
			m.stop()
			return err
		}
		t, err = timedEpoch(m, 1)
		if err == nil {
			cached = append(cached, t)
			st, err = m.stats()
		}
		m.stop()
		if err != nil {
			return err
		}
		lm, err := mount(bin, work, src)
		if err != nil {
			return err
		}
		t, err = timedEpoch(lm, 0)
		lm.stop()
		if err != nil {
			return err
		}
		local = append(local, t)
		fmt.Fprintf(os.Stderr, "run %d: S3 cold %.2fs, disk cache %.2fs, local cold %.2fs\n", r+1, cold[r], cached[r], local[r])
	}
	bytes := st.Epochs[0].SourceBytes
	fmt.Printf("Dataset: %s of TFRecord (%d records of 256 features, 16 files), versitygw on 127.0.0.1; %d runs, median (min–max).\n\n",
		humanize.IBytes(uint64(bytes)), records, runs)
	fmt.Println("| epoch | seconds | MB/s | from the source | from the disk cache |")
	fmt.Println("|---|---|---|---|---|")
	row := func(name string, v []float64, src, disk string) {
		m, lo, hi := summary(v)
		fmt.Printf("| %s | %.2f (%.2f–%.2f) | %.0f | %s | %s |\n", name, m, lo, hi, float64(bytes)/m/1e6, src, disk)
	}
	row("S3, cold (fills the disk cache)", cold, fmt.Sprintf("%s in %d requests", humanize.IBytes(uint64(st.Epochs[0].SourceBytes)), st.SourceRequests), "0")
	row("S3, second epoch, from the disk cache", cached, humanize.IBytes(uint64(st.Epochs[1].SourceBytes)), humanize.IBytes(uint64(st.Epochs[1].DiskCacheBytes)))
	row("local directory, cold", local, "", "")
	fmt.Printf("\nDisk cache after the last run's epoch 1: %d blocks written, %d not cached because the write queue was full, %d not admitted.\n",
		st.DiskCache.Written, st.DiskCache.WriteSkipped, st.DiskCache.NotAdmitted)
	mc, _, _ := summary(cached)
	ml, _, _ := summary(local)
	fmt.Printf("\nSecond epoch from the disk cache / cold local epoch: %.2f× as fast (target ≥ 0.9×).\n", ml/mc)
	return nil
}

func summary(v []float64) (med, lo, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func upload(addr, dir string) error {
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return err
	}
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := c.ListBuckets(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("versitygw does not answer: %w", err)
		}
	}
	if err := c.MakeBucket(ctx, "data", minio.MakeBucketOptions{}); err != nil {
		return err
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		if _, err := c.FPutObject(ctx, "data", "set/"+e.Name(), filepath.Join(dir, e.Name()), minio.PutObjectOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// daemon is a corgifs mount served by a child process.
type daemon struct {
	dir string
	cmd *exec.Cmd
}

func mount(bin, work, src string, flags ...string) (*daemon, error) {
	dir, err := os.MkdirTemp(work, "mnt-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"mount", src, dir, "--seed", "1", "--cache-dir", filepath.Join(work, "index-cache")}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, cmd: cmd}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(api.StatsPath(dir)); err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("mount of %s did not serve", src)
		}
	}
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	os.Remove(d.dir)
}

func (d *daemon) stats() (api.Stats, error) {
	var s api.Stats
	b, err := os.ReadFile(api.StatsPath(d.dir))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	if s.DiskCache == nil {
		return s, fmt.Errorf("%s has no disk_cache: the mount runs without --disk-cache", api.StatsPath(d.dir))
	}
	return s, nil
}

// settled waits until every block fetched was written to the disk cache
// or turned away.
func (d *daemon) settled() error {
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		s, err := d.stats()
		if err != nil {
			return err
		}
		c := s.DiskCache
		if c.Written+c.WriteSkipped+c.NotAdmitted >= s.SourceRequests || c.Disabled != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the disk cache did not write what was fetched: %+v", s)
		}
	}
}

// timedEpoch drops the page cache and times `cat` of part 0 of 1 of epoch.
func timedEpoch(d *daemon, epoch int) (float64, error) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return 0, fmt.Errorf("dropping the page cache (needs root): %w", err)
	}
	part := filepath.Join(d.dir, fmt.Sprintf("epoch-%04d", epoch), "part-00000-of-00001.tfrecord")
	start := time.Now()
	if out, err := exec.Command("sh", "-c", "cat \"$0\" > /dev/null", part).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("cat %s: %v %s", part, err, out)
	}
	return time.Since(start).Seconds(), nil
}
