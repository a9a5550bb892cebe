//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const s3Heading = "## Object store: a cold epoch from S3 (issue 14)"

// The keys of either server: MinIO's (startMinIO), given to versitygw
// too, so the mounts' environment is the same whichever serves them.
const (
	s3Access = minioAccess
	s3Secret = minioSecret
	s3Bucket = "bench"
	s3Prefix = "data"
)

// s3Results is what the object store section measured on one dataset.
type s3Results struct {
	endpoint string
	load     [2]string
	// MB/s per run of each way to read the objects.
	seq, par, corgifs []float64
	coldLocal         []float64 // corgifs of the local directory, the same epoch
	prefetch4         []float64 // corgifs with --prefetch 4
	block8            []float64 // corgifs with --block-size 8MiB
	// CPU seconds per GiB of each reader (keyed as the rows), per run:
	// the server's, and the client's (the benchmark process for plain
	// GETs, the corgifs daemon for a mount; cat's own is not counted).
	serverCPU, clientCPU map[string][]float64
	// corgifs, read from its disk cache after a remount (nil without
	// --disk-cache), and a cold epoch of the local directory.
	diskCache, local []float64
	diskCacheGETs    []int64
	hasDiskCache     bool
	epochGETs        []int64 // counted at the server, one per corgifs run
	statsGETs        []int64 // the same, as the mount's stats.json counts them
	indexGETs        int64
	indexMode        string // config.json's dataset.index: full or probe
	recordsUnknown   bool   // config.json's dataset.records null (a probed index)
	indexSecs        float64
	blocks           int
	blockSize        int64
	records          int64
	// A sample of per-record ranged GETs, as a map-style reader makes them.
	recordSample []recordGETs
	// tune's probe of the same store.
	tune struct {
		Storage struct {
			Sizes []struct {
				BlockSize int64   `json:"block_size"`
				InFlight  int     `json:"in_flight"`
				MBps      float64 `json:"mb_per_s"`
				Skipped   string  `json:"skipped"`
			} `json:"sizes"`
			Recommended int64 `json:"recommended"`
			Concurrency int   `json:"concurrency"`
		} `json:"storage"`
		Mount string `json:"mount"`
	}
}

// recordGETs is a timed sample of per-record ranged GETs.
type recordGETs struct {
	inFlight int
	gets     int
	bytes    int64
	secs     float64
}

func (r recordGETs) perSec() float64 { return float64(r.gets) / r.secs }

// s3Server is an S3 server on 127.0.0.1 serving a directory (DIR/root):
// versitygw, whose access log the GETs are counted in, or MinIO, whose
// request counters are read from its metrics.
type s3Server struct {
	kind     string // s3Versitygw or s3MinIO
	cmd      *exec.Cmd
	endpoint string
	logPath  string
	client   *minio.Client
	minio    *minioServer // with kind s3MinIO, the server cmd runs
}

// The S3 servers the benchmarks can start (--s3-server).
const (
	s3Versitygw = "versitygw"
	s3MinIO     = "minio"
)

// serverName is how the results name the server of kind (--s3-server).
func serverName(kind string) string {
	if kind == s3MinIO {
		return "MinIO"
	}
	return "versitygw"
}

// startS3Server starts a server of kind on a free port of 127.0.0.1,
// serving dir/root (MinIO: dir/minio-root), and waits until it answers.
func startS3Server(ctx context.Context, dir, kind string) (*s3Server, error) {
	switch kind {
	case s3Versitygw, "":
		return startVersitygw(ctx, dir)
	case s3MinIO:
		// MinIO keeps its own layout (xl.meta and parts): a directory of
		// its own, apart from versitygw's plain files. startMinIO logs
		// to dir/minio.log, beside it.
		m, err := startMinIO(ctx, filepath.Join(dir, "minio-root"))
		if err != nil {
			return nil, err
		}
		return &s3Server{kind: kind, cmd: m.cmd, endpoint: m.endpoint, client: m.client, minio: m}, nil
	default:
		return nil, fmt.Errorf("unknown S3 server %q: want %s or %s", kind, s3Versitygw, s3MinIO)
	}
}

// startVersitygw starts versitygw's posix backend on dir/root with its
// access log on, where gets counts the GETs.
func startVersitygw(ctx context.Context, dir string) (*s3Server, error) {
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		return nil, errors.New("no versitygw on PATH: GOBIN=/usr/local/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0")
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s := &s3Server{kind: s3Versitygw, endpoint: "http://" + addr, logPath: filepath.Join(dir, "access.log")}
	os.Remove(s.logPath)
	logf, err := os.Create(filepath.Join(dir, s3Versitygw+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.CommandContext(ctx, bin, "--port", addr, "--access", s3Access, "--secret", s3Secret, "--quiet",
		"--access-log", s.logPath, "posix", root)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.client, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""),
		BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
	if err != nil {
		s.stop()
		return nil, err
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := s.client.ListBuckets(ctx); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("versitygw did not answer at %s: %w", s.endpoint, err)
		}
	}
}

func (s *s3Server) stop() {
	if s.minio != nil {
		s.minio.stop()
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// gets counts the GetObject requests the server has answered so far.
// versitygw's access log is written as requests end: a short wait first
// lets the last ones in. MinIO counts them in its metrics, which it
// caches for 10 s: a read waits until they are fresh (minioServer.gets,
// as --probe and --s3fs read them), up to 11 s after the last.
func (s *s3Server) gets() (int64, error) {
	if s.minio != nil {
		return s.minio.gets(context.Background())
	}
	time.Sleep(300 * time.Millisecond)
	f, err := os.Open(s.logPath)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(" s3_GetObject ")) {
			n++
		}
	}
	return n, sc.Err()
}

// upload puts the dataset's files under bench/data/, unless they are
// there already with their sizes (a reused work directory).
func (s *s3Server) upload(ctx context.Context, ds *dataset) error {
	if ok, _ := s.client.BucketExists(ctx, s3Bucket); !ok {
		if err := s.client.MakeBucket(ctx, s3Bucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	for i, name := range ds.Files {
		key := s3Prefix + "/" + name
		fi, err := os.Stat(ds.paths()[i])
		if err != nil {
			return err
		}
		if st, err := s.client.StatObject(ctx, s3Bucket, key, minio.StatObjectOptions{}); err == nil && st.Size == fi.Size() {
			continue
		}
		if _, err := s.client.FPutObject(ctx, s3Bucket, key, ds.paths()[i], minio.PutObjectOptions{}); err != nil {
			return fmt.Errorf("upload %s: %w", name, err)
		}
	}
	return nil
}

// getWhole reads object key with one GET from start to end.
func (s *s3Server) getWhole(ctx context.Context, key string, buf []byte) (int64, error) {
	o, err := s.client.GetObject(ctx, s3Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, err
	}
	defer o.Close()
	return io.CopyBuffer(io.Discard, struct{ io.Reader }{o}, buf)
}

// runS3 measures the object store section on one dataset: versitygw
// serves a copy of it from this machine's disk, and one epoch is read
// cold, round-robin, by sequential whole-object GETs, by one GET per
// object all at once, and by `cat` of a corgifs part; GETs are counted at
// the server; a sample of per-record GETs gives the map-style reader's
// rate; with --disk-cache (if this corgifs has it) a remounted epoch from
// the disk cache is compared with a cold epoch of the local directory.
func (e *runEnv) runS3(ctx context.Context) error {
	dir := filepath.Join(e.work, "s3-epoch")
	srv, err := startS3Server(ctx, dir, e.o.s3Server)
	if err != nil {
		return err
	}
	defer srv.stop()
	res := &s3Results{endpoint: srv.endpoint, serverCPU: map[string][]float64{}, clientCPU: map[string][]float64{}}
	e.s3 = res
	e.logf("%s at %s serving %s; uploading the dataset", srv.kind, srv.endpoint, filepath.Join(dir, "root"))
	if err := srv.upload(ctx, e.ds); err != nil {
		return err
	}
	setS3Env(s3Access, s3Secret)
	url := "s3://" + s3Bucket + "/" + s3Prefix
	cache := filepath.Join(dir, "cache")
	os.RemoveAll(cache) // the index is timed and its GETs counted

	keys := make([]string, len(e.ds.Files))
	for i, f := range e.ds.Files {
		keys[i] = s3Prefix + "/" + f
	}
	mbps := func(secs float64) float64 { return float64(e.ds.Bytes) / secs / 1e6 }
	mount := func(name string, src string, args ...string) (*daemon, error) {
		mnt := filepath.Join(dir, "mnt", name)
		argv := append([]string{e.bins.corgifs, "mount", src, mnt, "--seed", "1", "--cache-dir", cache, "--s3-endpoint", srv.endpoint}, args...)
		if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
			return nil, err
		}
		return startDaemon(ctx, "corgifs "+name, mnt, filepath.Join(dir, "logs", name+".log"),
			api.ConfigPath(mnt), argv...)
	}
	// The index: built by a first mount (with the block size the mount
	// chooses for this dataset), timed to the mount's readiness, loaded
	// by every mount below.
	if err := dropCaches(); err != nil {
		return err
	}
	g0, err := srv.gets()
	if err != nil {
		return err
	}
	start := time.Now()
	d, err := mount("index", url)
	if err != nil {
		return err
	}
	res.indexSecs = time.Since(start).Seconds()
	g1, err := srv.gets()
	var c api.Config
	err = errors.Join(err, readJSON(api.ConfigPath(d.mnt), &c))
	if err := errors.Join(err, d.stop()); err != nil {
		return err
	}
	res.indexGETs = g1 - g0
	res.blocks, res.blockSize = c.Dataset.Blocks, c.BlockSize
	res.indexMode, res.recordsUnknown = c.Dataset.Index, c.Dataset.Records == nil
	if res.records, err = e.ds.records(c); err != nil {
		return err
	}

	gib := float64(e.ds.Bytes) / (1 << 30)
	selfCPU := func() float64 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	pidCPU := func(pid int) float64 { c, _ := cpuSeconds(pid); return c }
	// measure returns a function that, called after a reader's epoch,
	// records the CPU the server and client used since.
	measure := func(key string, client func() float64) func() {
		s0, c0 := pidCPU(srv.cmd.Process.Pid), client()
		return func() {
			res.serverCPU[key] = append(res.serverCPU[key], (pidCPU(srv.cmd.Process.Pid)-s0)/gib)
			res.clientCPU[key] = append(res.clientCPU[key], (client()-c0)/gib)
		}
	}
	// coldCat times `cat` of epoch r's one part through d, mounted
	// fresh, with the page cache dropped, measuring d's CPU as key; it
	// stops d and returns MB/s.
	coldCat := func(d *daemon, r int, key string) (float64, error) {
		if err := dropCaches(); err != nil {
			d.kill()
			return 0, err
		}
		done := measure(key, func() float64 { return pidCPU(d.pid()) })
		secs, err := timeCmd(ctx, nil, "cat", partPath(d.mnt, r, 0, 1))
		if err != nil {
			d.kill()
			return 0, err
		}
		done()
		return mbps(secs), d.stop()
	}
	res.load[0] = loadAverage()
	for r := range e.o.runs {
		// Sequential whole-object GETs, one at a time.
		if err := dropCaches(); err != nil {
			return err
		}
		done := measure("seq", selfCPU)
		start = time.Now()
		n, err := srv.wholeGETs(ctx, keys, 1)
		if err != nil {
			return err
		}
		if n != e.ds.Bytes {
			return fmt.Errorf("sequential GETs read %d bytes, the dataset has %d", n, e.ds.Bytes)
		}
		res.seq = append(res.seq, mbps(time.Since(start).Seconds()))
		done()

		// One GET per object, all at once.
		if err := dropCaches(); err != nil {
			return err
		}
		done = measure("par", selfCPU)
		start = time.Now()
		if n, err = srv.wholeGETs(ctx, keys, len(keys)); err != nil {
			return err
		}
		if n != e.ds.Bytes {
			return fmt.Errorf("parallel GETs read %d bytes, the dataset has %d", n, e.ds.Bytes)
		}
		res.par = append(res.par, mbps(time.Since(start).Seconds()))
		done()

		// corgifs: a fresh mount (nothing loaded), the server's files
		// dropped from the page cache, then `cat` of epoch r's one part.
		d, err := mount(fmt.Sprintf("cold-%d", r), url)
		if err != nil {
			return err
		}
		if err := dropCaches(); err != nil {
			d.kill()
			return err
		}
		g0, err := srv.gets()
		if err != nil {
			d.kill()
			return err
		}
		done = measure("corgifs", func() float64 { return pidCPU(d.pid()) })
		secs, err := timeCmd(ctx, nil, "cat", partPath(d.mnt, r, 0, 1))
		if err != nil {
			d.kill()
			return err
		}
		done()
		g1, err := srv.gets()
		var st struct {
			Source struct {
				GETs int64 `json:"gets"`
			} `json:"source"`
		}
		err = errors.Join(err, readJSON(api.StatsPath(d.mnt), &st))
		if err := errors.Join(err, d.stop()); err != nil {
			return err
		}
		res.statsGETs = append(res.statsGETs, st.Source.GETs)
		res.corgifs = append(res.corgifs, mbps(secs))
		res.epochGETs = append(res.epochGETs, g1-g0)

		// The same with four buffers prefetched instead of two: GETs
		// wait for the network, and a deeper pipeline hides it.
		d4, err := mount(fmt.Sprintf("cold-prefetch4-%d", r), url, "--prefetch", "4")
		if err != nil {
			return err
		}
		v, err := coldCat(d4, r, "prefetch4")
		if err != nil {
			return err
		}
		res.prefetch4 = append(res.prefetch4, v)

		// With the block size tune recommends for object stores: four
		// times fewer GETs, each costing the server as much CPU.
		d8, err := mount(fmt.Sprintf("cold-block8-%d", r), url, "--block-size", "8MiB")
		if err != nil {
			return err
		}
		if v, err = coldCat(d8, r, "block8"); err != nil {
			return err
		}
		res.block8 = append(res.block8, v)

		// The same epoch through corgifs from the local directory: what
		// the mount itself costs, with no object store.
		l, err := e.mountCorgifs(ctx, fmt.Sprintf("s3-cold-local-%d", r), "")
		if err != nil {
			return err
		}
		if v, err = coldCat(l, r, "local"); err != nil {
			return err
		}
		res.coldLocal = append(res.coldLocal, v)
		e.logf("run %d: sequential GETs %.0f MB/s, parallel GETs %.0f MB/s, corgifs %.0f MB/s (%d GETs), --prefetch 4 %.0f MB/s, 8 MiB blocks %.0f MB/s, corgifs of the local directory %.0f MB/s",
			r, res.seq[r], res.par[r], res.corgifs[r], g1-g0, res.prefetch4[r], res.block8[r], res.coldLocal[r])
	}
	res.load[1] = loadAverage()

	if err := e.sampleRecordGETs(ctx, srv, res); err != nil {
		return err
	}
	// What tune says of this store, cold.
	if err := dropCaches(); err != nil {
		return err
	}
	var out bytes.Buffer
	if _, err := timeCmd(ctx, &out, e.bins.corgifs, "tune", url, "--s3-endpoint", srv.endpoint, "--probe-time", "4s", "--json"); err != nil {
		return err
	}
	if err := json.Unmarshal(out.Bytes(), &res.tune); err != nil {
		return fmt.Errorf("corgifs tune --json: %w", err)
	}
	return e.runDiskCache(ctx, srv, res, mount)
}

// sampleRecordGETs times ranged GETs of single records at random, as a
// map-style Dataset reading a plain S3 mount (mountpoint-s3, s3fs) makes
// them: one GET per record, 16 and 64 in flight.
func (e *runEnv) sampleRecordGETs(ctx context.Context, srv *s3Server, res *s3Results) error {
	type rec struct {
		key       string
		off, size int64
	}
	var recs []rec
	for i, p := range e.ds.paths() {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// TFRecord frames: length (8), its CRC (4), payload, CRC (4).
		for off := int64(0); off+12 <= int64(len(b)); {
			n := int64(binary.LittleEndian.Uint64(b[off:])) + 16
			recs = append(recs, rec{s3Prefix + "/" + e.ds.Files[i], off, n})
			off += n
		}
	}
	if int64(len(recs)) != res.records {
		return fmt.Errorf("the dataset's files hold %d TFRecord frames, its record count is %d: remove %s to have it written again",
			len(recs), res.records, e.ds.dir)
	}
	if err := dropCaches(); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, inFlight := range []int{16, 64} {
		sample := min(len(recs), 4000)
		next := make(chan rec)
		var bytesRead atomic.Int64
		var firstErr error
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 0, 1<<20)
				for r := range next {
					var o minio.GetObjectOptions
					o.SetRange(r.off, r.off+r.size-1)
					obj, err := srv.client.GetObject(ctx, s3Bucket, r.key, o)
					var n int64
					if err == nil {
						n, err = io.CopyBuffer(io.Discard, struct{ io.Reader }{obj}, buf[:cap(buf)])
						obj.Close()
					}
					if err == nil && n != r.size {
						err = fmt.Errorf("GET %s at %d: %d bytes, want %d", r.key, r.off, n, r.size)
					}
					if err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						continue
					}
					bytesRead.Add(n)
				}
			}()
		}
		for range sample {
			next <- recs[rng.IntN(len(recs))]
		}
		close(next)
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		res.recordSample = append(res.recordSample, recordGETs{inFlight: inFlight, gets: sample, bytes: bytesRead.Load(),
			secs: time.Since(start).Seconds()})
	}
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// runDiskCache compares, when this corgifs has --disk-cache, an epoch
// served from the disk cache after a remount with a cold epoch of the
// local directory.
func (e *runEnv) runDiskCache(ctx context.Context, srv *s3Server, res *s3Results,
	mount func(name, src string, args ...string) (*daemon, error)) error {
	help, _ := exec.CommandContext(ctx, e.bins.corgifs, "mount", "--help").CombinedOutput()
	if !strings.Contains(string(help), "-disk-cache") {
		e.logf("this corgifs has no --disk-cache: the disk cache comparison is left out")
		return nil
	}
	res.hasDiskCache = true
	url := "s3://" + s3Bucket + "/" + s3Prefix
	dc := filepath.Join(e.work, "s3-epoch", "diskcache")
	os.RemoveAll(dc)
	args := []string{"--disk-cache", dc}
	// Fill the disk cache: one epoch read through.
	d, err := mount("fill", url, args...)
	if err != nil {
		return err
	}
	if _, err := timeCmd(ctx, nil, "cat", partPath(d.mnt, 0, 0, 1)); err != nil {
		d.kill()
		return err
	}
	if err := d.stop(); err != nil {
		return err
	}
	for r := range e.o.runs {
		// A remount: nothing in memory, every block on the local disk.
		d, err := mount(fmt.Sprintf("disk-%d", r), url, args...)
		if err != nil {
			return err
		}
		if err := dropCaches(); err != nil {
			d.kill()
			return err
		}
		g0, err := srv.gets()
		if err != nil {
			d.kill()
			return err
		}
		secs, err := timeCmd(ctx, nil, "cat", partPath(d.mnt, r+1, 0, 1))
		if err != nil {
			d.kill()
			return err
		}
		g1, err := srv.gets()
		if err := errors.Join(err, d.stop()); err != nil {
			return err
		}
		res.diskCache = append(res.diskCache, float64(e.ds.Bytes)/secs/1e6)
		res.diskCacheGETs = append(res.diskCacheGETs, g1-g0)

		// The same epoch from the local directory, cold.
		l, err := e.mountCorgifs(ctx, fmt.Sprintf("s3-local-%d", r), "")
		if err != nil {
			return err
		}
		if err := dropCaches(); err != nil {
			l.kill()
			return err
		}
		secs, err = timeCmd(ctx, nil, "cat", partPath(l.mnt, r+1, 0, 1))
		if err != nil {
			l.kill()
			return err
		}
		if err := l.stop(); err != nil {
			return err
		}
		res.local = append(res.local, float64(e.ds.Bytes)/secs/1e6)
		e.logf("run %d: disk cache %.0f MB/s (%d GETs), local directory %.0f MB/s", r, res.diskCache[r], g1-g0, res.local[r])
	}
	return nil
}

func (h *harness) s3Markdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", s3Heading)
	if h.o.s3Server == s3MinIO {
		p("A real S3 server on this machine: MinIO (the server `.ci/run` builds for the tests) serving a\n")
		p("copy of the dataset from this machine's disk on 127.0.0.1 (its request counters, read from its\n")
		p("metrics, count the GETs).\n")
	} else {
		p("A real S3 server on this machine: versitygw v1.8.0 (the S3 gateway `.ci/run` builds for the\n")
		p("tests; the issue names MinIO, which serves the same API) serving a copy of the dataset from\n")
		p("this machine's disk on 127.0.0.1 (posix backend, access log on, where the GETs are counted).\n")
	}
	p("Every figure is from the same run. Before each timed epoch the page cache is dropped (`echo 3 >\n")
	p("/proc/sys/vm/drop_caches`), so the server reads its files from the disk. Round-robin, %d runs\n", h.o.runs)
	p("each: (1) the objects read with minio-go (the client corgifs uses), one whole-object GET after\n")
	p("another; (2) one whole-object GET per object, all at once; (3) a fresh `corgifs mount\n")
	p("s3://bench/data MNT --seed 1` (defaults: corgipile, K=1, --s3-concurrency 24, --max-memory\n")
	p("1 GiB; index built before by a first mount) and `cat` of epoch r's part, timed from start to exit.\n")
	p("The map-style reader through a plain S3 mount (mountpoint-s3, s3fs) makes one ranged GET per\n")
	p("record: its GETs per epoch are the record count, and a random sample of such GETs (minio-go, 16\n")
	p("and 64 in flight) gives their rate.\n\n")
	p("%s", h.sectionRest(took, sectionCommand(h.o, "--s3"), (*runEnv).s3Body))
	return b.String()
}

func (e *runEnv) s3Body() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	res := e.s3
	gb := float64(e.ds.Bytes) / 1e9
	seq, par, cg := summarize(res.seq), summarize(res.par), summarize(res.corgifs)
	best, bestName := seq, "sequential GETs"
	if par.med > seq.med {
		best, bestName = par, "parallel GETs"
	}
	p("#### Setup\n\n%s", datasetLine(e.ds))
	p("- Server: %s at %s, objects `s3://%s/%s/`, %d of them.\n", serverName(e.o.s3Server), res.endpoint, s3Bucket, s3Prefix, len(e.ds.Files))
	how := "full: every object read once"
	if res.indexMode == "probe" {
		how = "probe: a small ranged GET at each multiple of the block size finds the record boundary there; records are counted as blocks load"
	}
	p("- Index (%s; built by a first mount, cold, timed to the mount's readiness): %.1f s, %d GETs.\n", how, res.indexSecs, res.indexGETs)
	counted := ""
	if res.recordsUnknown {
		counted = " (as the dataset was written: the probed index's config.json has none before its blocks load)"
	}
	p("- Blocks: %d of %s (the block size rule for this dataset), %d records%s.\n", res.blocks, fmtBytes(res.blockSize), res.records, counted)
	var probe []string
	for _, t := range res.tune.Storage.Sizes {
		if t.Skipped != "" {
			continue
		}
		probe = append(probe, fmt.Sprintf("%s: %.0f MB/s (%d in flight)", fmtBytes(t.BlockSize), t.MBps, t.InFlight))
	}
	p("- `corgifs tune s3://… --probe-time 4s` (ranged GETs at random offsets, cold): %s; it recommends\n", strings.Join(probe, ", "))
	p("  `--block-size %s --s3-concurrency %d`.\n", fmtBytes(res.tune.Storage.Recommended), res.tune.Storage.Concurrency)
	p("%s\n", loadLine(res.load))
	p("#### One cold epoch (%.2f GB)\n\n", gb)
	p("| reader | median MB/s | min–max | × the better plain way | server CPU s/GiB | client CPU s/GiB | runs in order, MB/s |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	row := func(name, key string, v []float64) {
		d := summarize(v)
		srvCPU := fmt.Sprintf("%.2f", summarize(res.serverCPU[key]).med)
		if key == "local" {
			srvCPU = "–"
		}
		p("| %s | %.0f | %.0f–%.0f | %.2f | %s | %.2f | %s |\n", name, d.med, d.lo, d.hi, d.med/best.med,
			srvCPU, summarize(res.clientCPU[key]).med, join(v, "%.0f"))
	}
	row("minio-go, whole-object GETs one after another", "seq", res.seq)
	row(fmt.Sprintf("minio-go, %d whole-object GETs at once", len(e.ds.Files)), "par", res.par)
	row("corgifs corgipile, `cat` of the part (fresh mount)", "corgifs", res.corgifs)
	row("corgifs corgipile `--prefetch 4` (four buffers loaded ahead, not two)", "prefetch4", res.prefetch4)
	row("corgifs corgipile `--block-size 8MiB` (a quarter of the GETs)", "block8", res.block8)
	row("for reference: corgifs corgipile of the local directory, cold, the same epoch", "local", res.coldLocal)
	cl := summarize(res.coldLocal)
	p("\nTarget ≥ 0.9× the better plain way (%s, %.0f MB/s): corgifs reached %.2f×. The same mount of the\n", bestName, best.med, cg.med/best.med)
	p("local directory read that epoch at %.0f MB/s: from S3 corgifs ran at %.2f× its own speed on local files.\n", cl.med, cg.med/cl.med)
	p("The plain GETs hand their bytes to no one; corgifs copies them into its buffers and serves them\n")
	p("through FUSE to another process, on the same CPUs as the server (CPU columns: the server's\n")
	p("%s and the client, the benchmark process or the corgifs daemon; `cat`'s is not counted).\n\n", serverName(e.o.s3Server))

	p("#### GET requests per epoch\n\n")
	p("| reader | GETs per epoch | bytes per GET |\n| --- | ---: | ---: |\n")
	p("| corgifs corgipile (counted at the server, per run) | %s | %s |\n", joinCounts(res.epochGETs), fmtBytes(e.ds.Bytes/max(1, medianInt(res.epochGETs))))
	p("| corgifs corgipile (its stats.json, `source.gets`, per run) | %s | |\n", joinCounts(res.statsGETs))
	p("| corgifs: the index's blocks | %d | %s |\n", res.blocks, fmtBytes(e.ds.Bytes/int64(max(1, res.blocks))))
	p("| map-style reader, a GET per record | %d | %s |\n", res.records, fmtBytes(e.ds.Bytes/max(1, res.records)))
	p("\nA part's read ends by prefetching the first two buffers of the next epoch, whose blocks that epoch\n")
	p("then finds loaded: an epoch costs one GET per block in the steady state.\n")
	p("\nThe per-record reader makes %.0f× the GETs of corgifs.\n\n", float64(res.records)/float64(max(1, medianInt(res.epochGETs))))
	p("| per-record ranged GETs (random records, cold) | GETs/s | MB/s | an epoch at this rate | × corgifs's epoch time |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, s := range res.recordSample {
		epoch := float64(res.records) / s.perSec()
		p("| %d in flight, %d GETs | %.0f | %.0f | %.0f s | %.1f× |\n", s.inFlight, s.gets, s.perSec(), float64(s.bytes)/s.secs/1e6,
			epoch, epoch/(float64(e.ds.Bytes)/cg.med/1e6))
	}
	p("\n#### Second epoch from the disk cache vs a cold local directory\n\n")
	if !res.hasDiskCache {
		p("Not measured: this corgifs has no `--disk-cache`.\n")
		return b.String()
	}
	dc, lo := summarize(res.diskCache), summarize(res.local)
	p("`--disk-cache WORK/records-SIZE/s3-epoch/diskcache` filled by one epoch through a first mount; then, %d runs each, a\n", e.o.runs)
	p("remount (nothing in memory) reading epoch r+1 from the disk cache, and a fresh mount of the local\n")
	p("directory reading the same epoch; the page cache dropped before each.\n\n")
	p("| reader | median MB/s | min–max | GETs to the server | runs in order, MB/s |\n| --- | ---: | ---: | ---: | ---: |\n")
	p("| corgifs s3:// from its disk cache | %.0f | %.0f–%.0f | %s | %s |\n", dc.med, dc.lo, dc.hi, joinCounts(res.diskCacheGETs), join(res.diskCache, "%.0f"))
	p("| corgifs of the local directory, cold | %.0f | %.0f–%.0f | – | %s |\n", lo.med, lo.lo, lo.hi, join(res.local, "%.0f"))
	p("\nTarget ≥ 0.9×: the disk cache reached %.2f× the local directory.\n", dc.med/lo.med)
	return b.String()
}

func joinCounts(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

func medianInt(v []int64) int64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return int64(summarize(f).med)
}
