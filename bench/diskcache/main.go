//go:build linux

// Command diskcache measures issue 25's disk-cache target: an epoch that a
// fresh mount of an S3 dataset serves from --disk-cache against a cold
// epoch of a fresh mount of the same files in a local directory (target:
// at least 0.9 times as fast), both at the defaults.
//
// It measures what a user meets after a remount: every timed epoch is read
// by a new daemon (so no block of it is in the daemon's memory, prefetched
// at the end of the epoch before) with the page cache dropped just before,
// by `cat` of part 0 of 1. The dataset is the one `go run ./bench --s3speed`
// reads (datagen, 16 files of TFRecord sorted by label, records of about
// --record-size), so the two benchmarks measure the same thing.
//
// Per binary (the corgifs of this tree, and --against another one, such as
// a build of the main branch: each with its own disk cache, since their
// entry formats may differ) it first fills a disk cache with a cold epoch 0
// from S3 and waits until every block fetched is written or turned away.
// Then, --runs times, it reads epoch r+1 from each binary's disk cache and
// from the local directory, in an order rotated from run to run, so that
// the load of the shared machine weighs on each alike; ratios are taken
// within each run. It prints a Markdown table.
//
// Usage, as root (to drop the page cache), from the repository root:
//
//	go run ./bench/diskcache [--size 512MiB] [--record-size 100KiB] [--runs 5]
//	    [--server versitygw|minio] [--against BIN] [--profile] [--work DIR]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
	"github.com/dustin/go-humanize"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	access = "corgifs-bench-access"
	secret = "corgifs-bench-secret-key"
	bucket = "data"
	prefix = "set"
)

type options struct {
	size, recordSize int64
	runs             int
	work, server     string
	against          string
	profile          bool
}

func main() {
	var o options
	size := flag.String("size", "512MiB", "dataset `size`")
	rec := flag.String("record-size", "100KiB", "record `size`")
	flag.IntVar(&o.runs, "runs", 5, "alternated runs")
	flag.StringVar(&o.work, "work", "", "work `dir`ectory (default: a new one under /var/tmp, removed at the end)")
	flag.StringVar(&o.server, "server", "versitygw", "S3 server on 127.0.0.1: versitygw or minio (on PATH)")
	flag.StringVar(&o.against, "against", "", "another corgifs `binary` whose disk cache is measured alternated with this tree's")
	flag.BoolVar(&o.profile, "profile", false, "write a CPU profile of every disk-cache epoch's daemon into the work directory")
	flag.Parse()
	for _, v := range []struct {
		s   string
		dst *int64
	}{{*size, &o.size}, {*rec, &o.recordSize}} {
		n, err := humanize.ParseBytes(v.s)
		if err != nil || n == 0 {
			fmt.Fprintf(os.Stderr, "diskcache: %q: want a size such as 512MiB\n", v.s)
			os.Exit(2)
		}
		*v.dst = int64(n)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "diskcache:", err)
		os.Exit(1)
	}
}

// variant is one corgifs binary whose disk cache is measured.
type variant struct {
	name, bin, cache string
	fill             float64 // seconds of the cold S3 epoch that filled the cache
	fillStats        api.Stats
	config           api.Config
	// Per run: the seconds of the epoch from the disk cache, those to its
	// first byte, and the daemon's CPU seconds.
	secs, first, cpu []float64
	// Per run: the bytes of the epoch read from the source (0 when every
	// block came from the cache), and those the mount read from the
	// cache with O_DIRECT by the epoch's end (the next epoch's prefetched
	// buffers included).
	sourceBytes, direct []int64
}

func run(o options) error {
	var err error
	if o.work == "" {
		if o.work, err = os.MkdirTemp("/var/tmp", "corgifs-diskcache-"); err != nil {
			return err
		}
		defer os.RemoveAll(o.work)
	}
	bin := filepath.Join(o.work, "corgifs")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/corgifs").CombinedOutput(); err != nil {
		return fmt.Errorf("build corgifs (run from the repository root): %v\n%s", err, out)
	}
	vs := []*variant{{name: "this tree", bin: bin, cache: filepath.Join(o.work, "disk-cache-a")}}
	if o.against != "" {
		vs = append(vs, &variant{name: filepath.Base(o.against), bin: o.against, cache: filepath.Join(o.work, "disk-cache-b")})
	}
	src := filepath.Join(o.work, "src")
	s := synthetic(o.size, o.recordSize)
	sum, err := s.Write(context.Background(), src, nil)
	if err != nil {
		return fmt.Errorf("writing the dataset: %w", err)
	}
	addr, stop, err := startServer(o.server, filepath.Join(o.work, "s3"))
	if err != nil {
		return err
	}
	defer stop()
	if err := upload(addr, src); err != nil {
		return err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	os.Setenv("AWS_REGION", "us-east-1")
	url := "s3://" + bucket + "/" + prefix
	s3flags := func(v *variant) []string { return []string{"--s3-endpoint", "http://" + addr, "--disk-cache", v.cache} }

	for _, v := range vs {
		m, err := mount(v.bin, o.work, url, s3flags(v)...)
		if err != nil {
			return err
		}
		v.fill, _, _, err = m.epoch(0)
		if err == nil {
			v.fillStats, err = m.settled()
		}
		if err == nil {
			v.config, err = m.config()
		}
		m.stop()
		if err != nil {
			return err
		}
		d := v.fillStats.DiskCache
		fmt.Fprintf(os.Stderr, "%s: S3 cold epoch 0 %.2fs; disk cache written %d of %d fetched, %d skipped, %d not admitted, waited %.1fs\n",
			v.name, v.fill, d.Written, v.fillStats.SourceRequests, d.WriteSkipped, d.NotAdmitted, d.WriteWaitSeconds)
	}

	var local, localFirst, localCPU []float64
	var localConfig api.Config
	load0 := loadAverage()
	for r := range o.runs {
		epoch := r + 1
		readers := make([]func() error, 0, len(vs)+1)
		for _, v := range vs {
			readers = append(readers, func() error {
				flags := s3flags(v)
				if o.profile {
					flags = append(flags, "--cpuprofile", filepath.Join(o.work, fmt.Sprintf("cpu-%s-%d.pprof", strings.ReplaceAll(v.name, " ", "-"), r)))
				}
				m, err := mount(v.bin, o.work, url, flags...)
				if err != nil {
					return err
				}
				defer m.stop()
				secs, first, cpu, err := m.epoch(epoch)
				if err != nil {
					return err
				}
				st, err := m.stats()
				if err != nil {
					return err
				}
				v.secs, v.first, v.cpu = append(v.secs, secs), append(v.first, first), append(v.cpu, cpu)
				v.sourceBytes = append(v.sourceBytes, st.Epochs[epoch].SourceBytes)
				if st.DiskCache != nil {
					v.direct = append(v.direct, st.DiskCache.DirectBytes)
				}
				return nil
			})
		}
		readers = append(readers, func() error {
			var flags []string
			if o.profile {
				flags = []string{"--cpuprofile", filepath.Join(o.work, fmt.Sprintf("cpu-local-%d.pprof", r))}
			}
			m, err := mount(bin, o.work, src, flags...)
			if err != nil {
				return err
			}
			defer m.stop()
			secs, first, cpu, err := m.epoch(epoch)
			if err == nil {
				localConfig, err = m.config()
			}
			local, localFirst, localCPU = append(local, secs), append(localFirst, first), append(localCPU, cpu)
			return err
		})
		for i := range readers {
			if err := readers[(i+r)%len(readers)](); err != nil {
				return err
			}
		}
		line := fmt.Sprintf("run %d: local cold %.2fs (first byte %.2fs, daemon CPU %.2fs)", r+1, local[r], localFirst[r], localCPU[r])
		for _, v := range vs {
			line += fmt.Sprintf(", %s from the disk cache %.2fs (first byte %.2fs, %.2f×, daemon CPU %.2fs)", v.name, v.secs[r], v.first[r], local[r]/v.secs[r], v.cpu[r])
		}
		fmt.Fprintln(os.Stderr, line)
	}
	load1 := loadAverage()

	mb := func(secs float64) float64 { return float64(sum.Bytes) / secs / 1e6 }
	fmt.Printf("Dataset: %s of TFRecord (%d records of %s, 16 files, sorted by label), %s on 127.0.0.1; load average %s → %s.\n",
		humanize.IBytes(uint64(sum.Bytes)), s.Records, humanize.IBytes(uint64(sum.Bytes/int64(s.Records))), o.server, load0, load1)
	fmt.Printf("Defaults chosen: S3 block %s, buffer %s; local block %s, buffer %s.\n\n",
		humanize.IBytes(uint64(vs[0].config.BlockSize)), vs[0].config.Buffer, humanize.IBytes(uint64(localConfig.BlockSize)), localConfig.Buffer)
	fmt.Print("| run | local cold MB/s (first byte s) | daemon busy |")
	for _, v := range vs {
		fmt.Printf(" %s: disk cache MB/s (first byte s) | ÷ local | daemon busy |", v.name)
	}
	fmt.Print("\n|---|---|---|")
	for range vs {
		fmt.Print("---|---|---|")
	}
	fmt.Println()
	ratios := make([][]float64, len(vs))
	for r := range local {
		fmt.Printf("| %d | %.0f (%.2f) | %.0f%% |", r+1, mb(local[r]), localFirst[r], 100*localCPU[r]/local[r])
		for i, v := range vs {
			ratios[i] = append(ratios[i], local[r]/v.secs[r])
			fmt.Printf(" %.0f (%.2f) | %.2f× | %.0f%% |", mb(v.secs[r]), v.first[r], local[r]/v.secs[r], 100*v.cpu[r]/v.secs[r])
		}
		fmt.Println()
	}
	fmt.Println()
	for i, v := range vs {
		med, lo, hi := summary(ratios[i])
		d := v.fillStats.DiskCache
		fmt.Printf("- %s: disk cache ÷ local cold **%.2f×** median (%.2f–%.2f) of %d runs (target ≥ 0.9×); source bytes in the disk-cache epochs %v, bytes the mounts read directly from the cache %v; "+
			"first epoch from S3 %.0f MB/s wrote %d of %d blocks fetched (%d skipped, %d not admitted, %.1f s waited for the write queue).\n",
			v.name, med, lo, hi, len(ratios[i]), v.sourceBytes, v.direct, mb(v.fill), d.Written, v.fillStats.SourceRequests, d.WriteSkipped, d.NotAdmitted, d.WriteWaitSeconds)
	}
	if len(vs) == 2 {
		var ab []float64
		for r := range local {
			ab = append(ab, vs[1].secs[r]/vs[0].secs[r])
		}
		med, lo, hi := summary(ab)
		fmt.Printf("- %s ÷ %s, disk-cache epochs of the same run: %.2f× median (%.2f–%.2f).\n", vs[0].name, vs[1].name, med, lo, hi)
	}
	return nil
}

// synthetic is the dataset `bench --s3speed` reads at the same size and
// record size: datagen's records sorted by label in 16 files, with as many
// float features as make a record closest to recordSize.
func synthetic(size, recordSize int64) datagen.Synthetic {
	rec := func(features, id int) int64 {
		var b tfexample.Builder
		b.Int64(datagen.LabelFeature, 0)
		b.Float(datagen.ValueFeature, make([]float32, features)...)
		b.Int64(datagen.IDFeature, int64(id))
		return int64(len(b.AppendTo(nil)) + formats.FrameExtra)
	}
	dist := func(f int) int64 { return max(rec(f, 0)-recordSize, recordSize-rec(f, 0)) }
	est := max(1, int((recordSize-rec(1, 0))/4)+1)
	features := est
	for f := max(1, est-2); f <= est+2; f++ {
		if dist(f) < dist(features) {
			features = f
		}
	}
	records := int(size / rec(features, 0))
	records = int(size / rec(features, records/2))
	return datagen.Synthetic{Records: max(records, 16), Features: features, Classes: 4, Clustered: true, Files: 16, Seed: 1}
}

func summary(v []float64) (med, lo, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// startServer starts an S3 server serving dir on a free port of 127.0.0.1
// and returns its address and how to stop it.
func startServer(kind, dir string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	var cmd *exec.Cmd
	switch kind {
	case "versitygw":
		cmd = exec.Command("versitygw", "--port", addr, "--access", access, "--secret", secret, "--quiet", "posix", dir)
	case "minio":
		cmd = exec.Command("minio", "server", "--quiet", "--address", addr, dir)
		cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+access, "MINIO_ROOT_PASSWORD="+secret, "MINIO_BROWSER=off")
	default:
		return "", nil, fmt.Errorf("--server %s: want versitygw or minio", kind)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("%s (on PATH? GOBIN=/usr/local/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0): %w", kind, err)
	}
	return addr, func() { cmd.Process.Kill(); cmd.Wait() }, nil
}

func upload(addr, dir string) error {
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
	if err != nil {
		return err
	}
	ctx := context.Background()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.ListBuckets(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the S3 server does not answer at %s: %w", addr, err)
		}
	}
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		if _, err := c.FPutObject(ctx, bucket, prefix+"/"+e.Name(), filepath.Join(dir, e.Name()), minio.PutObjectOptions{}); err != nil {
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
	logf, err := os.OpenFile(filepath.Join(work, "mounts.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
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
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	return s, err
}

func (d *daemon) config() (api.Config, error) {
	var c api.Config
	b, err := os.ReadFile(api.ConfigPath(d.dir))
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	return c, err
}

// settled waits until every block fetched was written to the disk cache
// or turned away, and returns the stats then.
func (d *daemon) settled() (api.Stats, error) {
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		s, err := d.stats()
		if err != nil {
			return s, err
		}
		c := s.DiskCache
		if c == nil {
			return s, errors.New("stats.json has no disk_cache: the mount runs without --disk-cache")
		}
		if c.Written+c.WriteSkipped+c.NotAdmitted >= s.SourceRequests || c.Disabled != "" {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("the disk cache did not write what was fetched: %+v", *c)
		}
	}
}

// epoch drops the page cache and times a read of part 0 of 1 of epoch from
// start to end, in reads of 128 KiB as cat makes; it returns the seconds,
// those until the first byte (the first buffer's load) and the daemon's
// CPU seconds meanwhile.
func (d *daemon) epoch(epoch int) (secs, first, cpu float64, err error) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return 0, 0, 0, fmt.Errorf("dropping the page cache (needs root): %w", err)
	}
	part := filepath.Join(d.dir, fmt.Sprintf("epoch-%04d", epoch), "part-00000-of-00001.tfrecord")
	c0 := cpuSeconds(d.cmd.Process.Pid)
	start := time.Now()
	f, err := os.Open(part)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	// Reads of 128 KiB, as cat makes.
	buf := make([]byte, 128<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 && first == 0 {
			first = time.Since(start).Seconds()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("read %s: %w", part, err)
		}
	}
	secs = time.Since(start).Seconds()
	return secs, first, cpuSeconds(d.cmd.Process.Pid) - c0, nil
}

// cpuSeconds returns the user and system CPU time of process pid, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100
}
