//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/source/local"
)

const trafficHeading = "## Traffic of 8 nodes through their disk caches, measured and simulated (issue 15)"

// trafficOptions are the parameters of --traffic.
type trafficOptions struct {
	run        bool
	size       int64 // of the dataset
	recordSize int64
	block      int64
	parts      int
	exchanges  []float64
	epochs     int
	concurrent int // nodes mounted at once
	work       string
}

// trafficFlags registers the --traffic flags on fs.
func trafficFlags(fs *flag.FlagSet, o *trafficOptions) {
	*o = trafficOptions{size: 256 << 20, recordSize: 4 << 10, block: 512 << 10, parts: 8,
		exchanges: []float64{0, 0.1, 0.3, 1}, epochs: 4, concurrent: 2}
	fs.BoolVar(&o.run, "traffic", false, "mount a versitygw bucket of --traffic-size as --traffic-parts nodes, each with its own\n"+
		"disk cache of (1+Q)·N/K, each reading only its own part of pls (local for Q=0) for\n"+
		"--traffic-epochs epochs; bytes fetched per node and epoch and peak cache sizes, against\n"+
		"Q·N/K, (1+Q)·N/K and the simulation of --simulate (issue 15; no root needed beyond FUSE;\n"+
		"about 10 minutes with the defaults on 2 vCPUs) (default false)")
	fs.Var((*sizeValue)(&o.size), "traffic-size", "`size` of the --traffic dataset")
	fs.Var((*sizeValue)(&o.block), "traffic-block", "--block-size of the --traffic mounts")
	fs.IntVar(&o.parts, "traffic-parts", o.parts, "nodes K of --traffic")
	fs.Var((*fractionsValue)(&o.exchanges), "traffic-exchange", "comma separated exchange `fractions` Q of --traffic")
	fs.IntVar(&o.epochs, "traffic-epochs", o.epochs, "epochs each --traffic node reads")
	fs.IntVar(&o.concurrent, "traffic-concurrent", o.concurrent, "--traffic nodes mounted at once")
}

// trafficNode is what one node's mount did.
type trafficNode struct {
	fetched   []int64 // per epoch: source_bytes of stats.json
	disk      []int64 // per epoch: disk_cache_bytes
	memory    []int64 // per epoch: memory_bytes (buffers still loaded)
	size      []int64 // per epoch: the part file's size
	peak      int64   // disk_cache.peak_bytes_held
	maxBytes  int64   // disk_cache.max_bytes
	skipped   int64   // disk_cache.write_skipped
	refused   int64   // disk_cache.not_admitted
	evictions int64
}

// trafficRow is one Q over the K nodes.
type trafficRow struct {
	q        float64
	strategy string
	capacity int64 // data bytes of each node's cache: (1+Q)·N/K
	cacheArg int64 // --disk-cache-size given: capacity plus the entries' headers
	nodes    []trafficNode
	sim      cacheSimulation // this index's plans through the simulator's Belady cache
	synth    []float64       // per epoch: mean fetched per node, --simulate's synthetic index
	planned  bool            // every part file's size equals its plan's
}

type cacheSimulation struct {
	fetchMean []float64
	peak      int64
}

type trafficResults struct {
	o       trafficOptions
	bytes   int64 // N
	blocks  int
	records int
	rows    []*trafficRow
	took    time.Duration
	load    [2]string
}

// trafficEntryAllowance is what a disk-cache entry may take beyond its
// block's bytes (header, key: source, path, ETag, offsets): the cache's
// bound counts whole entry files, the simulation only blocks.
const trafficEntryAllowance = 256

const (
	trafficAccess = "corgifs-bench-access"
	trafficSecret = "corgifs-bench-secret-key"
)

// runTraffic runs the --traffic section and writes it into out.
func runTraffic(ctx context.Context, o trafficOptions, out string, stdout, stderr io.Writer) error {
	start := time.Now()
	work := o.work
	if work == "" {
		dir, err := os.MkdirTemp("", "corgifs-traffic-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		work = dir
	}
	work = filepath.Join(work, "traffic")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	bin := filepath.Join(work, "corgifs")
	if err := runIn(ctx, root, "go", "build", "-o", bin, "./cmd/corgifs"); err != nil {
		return err
	}
	ds, err := ensureDataset(ctx, filepath.Join(work, "records-"+formatSize(o.recordSize)), o.size, o.recordSize, stderr)
	if err != nil {
		return err
	}
	src, err := local.OpenDir(ds.dir, false, nil)
	if err != nil {
		return err
	}
	ix, err := index.Build(ctx, src, index.Options{BlockSize: o.block})
	if err != nil {
		return fmt.Errorf("index of %s: %w", ds.dir, err)
	}
	res := &trafficResults{o: o, bytes: ix.Bytes, blocks: len(ix.Blocks), records: ds.Synthetic.Records}

	gw, err := startVersity(ctx, filepath.Join(work, "s3"), stderr)
	if err != nil {
		return err
	}
	defer gw.stop()
	if err := gw.upload(ctx, "data", "traffic", ds.dir); err != nil {
		return err
	}
	logf("uploaded %s to s3://data/traffic on %s", fmtBytes(ds.Bytes), gw.endpoint)
	setS3Env(trafficAccess, trafficSecret)

	cacheDir := filepath.Join(work, "cache") // index sidecars, shared by the mounts
	mountNode := func(name string, args ...string) (*daemon, error) {
		mnt := filepath.Join(work, "mnt", name)
		argv := append([]string{bin, "mount", "s3://data/traffic", mnt, "--seed", "1", "--cache-dir", cacheDir,
			"--s3-endpoint", gw.endpoint, "--block-size", strconv.FormatInt(o.block, 10), "--parts", strconv.Itoa(o.parts)}, args...)
		if err := os.MkdirAll(filepath.Join(work, "logs"), 0o755); err != nil {
			return nil, err
		}
		return startDaemon(ctx, "corgifs "+name, mnt, filepath.Join(work, "logs", name+".log"),
			api.ConfigPath(mnt), argv...)
	}
	// The first mount indexes the bucket; the nodes reuse its sidecar.
	d, err := mountNode("index")
	if err != nil {
		return err
	}
	if err := d.stop(); err != nil {
		return err
	}

	res.load[0] = loadAverage()
	for _, q := range o.exchanges {
		row, err := trafficOne(ctx, o, ix, q, mountNode, work, logf)
		if err != nil {
			return err
		}
		res.rows = append(res.rows, row)
	}
	res.load[1] = loadAverage()

	// What --simulate says for a synthetic index of the same size and
	// block size.
	synth, err := runSimulate(simOptions{size: ix.Bytes, block: o.block, parts: []int{o.parts}, exchanges: o.exchanges, epochs: o.epochs})
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	for i, r := range synth.rows {
		res.rows[i].synth = r.fetchMean
	}
	res.took = time.Since(start)
	section := trafficMarkdown(res)
	if err := writeSection(out, trafficHeading, section); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nwrote a section of %s\n\n", section, out)
	return nil
}

func trafficParams(q float64) shuffler.Params {
	p := simParams(q)
	if q == 0 {
		p.Strategy = "local"
	}
	return p
}

// trafficOne measures one Q: the K nodes, o.concurrent at a time, and the
// simulation of this index's plans.
func trafficOne(ctx context.Context, o trafficOptions, ix *index.Index, q float64,
	mountNode func(string, ...string) (*daemon, error), work string, logf func(string, ...any)) (*trafficRow, error) {
	row := &trafficRow{q: q, strategy: trafficParams(q).Strategy, nodes: make([]trafficNode, o.parts), planned: true}
	row.capacity = int64(math.Ceil((1 + q) * float64(ix.Bytes) / float64(o.parts)))
	entries := int64(math.Ceil((1+q)*float64(len(ix.Blocks))/float64(o.parts))) + 1
	row.cacheArg = row.capacity + entries*trafficEntryAllowance

	// The simulation of these plans, as bench --simulate plays them.
	pl, err := shuffler.NewPlanner(ix, trafficParams(q))
	if err != nil {
		return nil, err
	}
	plans := make([][]int64, o.parts) // node → part size per epoch
	row.sim.fetchMean = make([]float64, o.epochs)
	for i := range o.parts {
		var reads []int32
		var bounds []int
		for e := range o.epochs {
			p, err := pl.Plan(e, i, o.parts)
			if err != nil {
				return nil, err
			}
			bounds = append(bounds, len(reads))
			for _, b := range p.Buffers {
				reads = append(reads, b.Blocks...)
			}
			plans[i] = append(plans[i], p.Size)
		}
		st := belady(reads, bounds, ix.BlockBytes, row.capacity)
		for e := range o.epochs {
			row.sim.fetchMean[e] += float64(st.fetched[e]) / float64(o.parts)
		}
		row.sim.peak = max(row.sim.peak, st.peak[o.epochs-1])
	}

	args := []string{"--strategy", row.strategy}
	if row.strategy == "pls" {
		args = append(args, "--exchange", strconv.FormatFloat(q, 'g', -1, 64))
	}
	sem := make(chan struct{}, max(1, o.concurrent))
	var wg sync.WaitGroup
	errs := make([]error, o.parts)
	for i := range o.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			dc := filepath.Join(work, fmt.Sprintf("dc-q%g-node%d", q, i))
			defer os.RemoveAll(dc)
			name := fmt.Sprintf("q%g-node%d", q, i)
			logf("Q=%g node %d of %d: cache %s", q, i, o.parts, fmtBytes(row.cacheArg))
			d, err := mountNode(name, append(args, "--disk-cache", dc, "--disk-cache-size", strconv.FormatInt(row.cacheArg, 10))...)
			if err != nil {
				errs[i] = err
				return
			}
			n, err := readNode(ctx, d.mnt, i, o)
			if serr := d.stop(); err == nil {
				err = serr
			}
			if err != nil {
				//lint:ignore ST1005 Q is the name of the parameter, as in the report
				errs[i] = fmt.Errorf("Q=%g node %d: %w", q, i, err)
				return
			}
			row.nodes[i] = *n
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, n := range row.nodes {
		for e, s := range n.size {
			if s != plans[i][e] {
				row.planned = false
				logf("Q=%g node %d epoch %d: the part has %d bytes, the simulated plan %d", q, i, e, s, plans[i][e])
			}
		}
	}
	return row, nil
}

// readNode reads part i of K of each epoch in turn, as a trainer does,
// then waits for the disk cache's writes and returns what stats.json says.
func readNode(ctx context.Context, mnt string, i int, o trafficOptions) (*trafficNode, error) {
	n := &trafficNode{}
	for e := range o.epochs {
		f, err := os.Open(partPath(mnt, e, i, o.parts))
		if err != nil {
			return nil, err
		}
		c, err := io.Copy(io.Discard, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("epoch %d: %w", e, err)
		}
		n.size = append(n.size, c)
	}
	var st api.Stats
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st = api.Stats{}
		if err := readJSON(api.StatsPath(mnt), &st); err != nil {
			return nil, err
		}
		if st.DiskCache == nil {
			return nil, errors.New("stats.json has no disk_cache")
		}
		d := st.DiskCache
		if d.Disabled != "" {
			return nil, fmt.Errorf("the disk cache stopped: %s", d.Disabled)
		}
		if d.Written+d.WriteSkipped+d.NotAdmitted >= st.SourceRequests {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the disk cache did not write what was read: %+v, %d requests", *d, st.SourceRequests)
		}
	}
	for e := range o.epochs {
		ep := st.Epochs[e]
		n.fetched = append(n.fetched, ep.SourceBytes)
		n.disk = append(n.disk, ep.DiskCacheBytes)
		n.memory = append(n.memory, ep.MemoryBytes)
	}
	d := st.DiskCache
	n.peak, n.maxBytes, n.skipped, n.refused, n.evictions = d.PeakHeld, d.MaxBytes, d.WriteSkipped, d.NotAdmitted, d.Evictions
	return n, nil
}

// versity is a versitygw S3 server on 127.0.0.1 serving a directory.
type versity struct {
	cmd      *exec.Cmd
	addr     string
	endpoint string
	client   *minio.Client
}

func startVersity(ctx context.Context, dir string, log io.Writer) (*versity, error) {
	gw, err := exec.LookPath("versitygw")
	if err != nil {
		return nil, errors.New("no versitygw on PATH (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	v := &versity{addr: l.Addr().String()}
	v.endpoint = "http://" + v.addr
	l.Close()
	v.client, err = minio.New(v.addr, &minio.Options{Creds: credentials.NewStaticV4(trafficAccess, trafficSecret, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, err
	}
	v.cmd = exec.Command(gw, "--port", v.addr, "--access", trafficAccess, "--secret", trafficSecret, "--quiet", "posix", dir)
	v.cmd.Stdout, v.cmd.Stderr = log, log
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := v.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := v.client.ListBuckets(ctx); err == nil {
			return v, nil
		} else if time.Now().After(deadline) {
			v.stop()
			return nil, fmt.Errorf("versitygw does not answer on %s: %w", v.addr, err)
		}
	}
}

func (v *versity) stop() {
	v.cmd.Process.Kill()
	v.cmd.Wait()
}

// upload creates bucket and puts every file of dir under prefix.
func (v *versity) upload(ctx context.Context, bucket, prefix, dir string) error {
	if err := v.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("make bucket %s: %w", bucket, err)
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		if _, err := v.client.FPutObject(ctx, bucket, prefix+"/"+e.Name(), filepath.Join(dir, e.Name()), minio.PutObjectOptions{}); err != nil {
			return fmt.Errorf("upload %s: %w", e.Name(), err)
		}
	}
	return nil
}

func trafficMarkdown(res *trafficResults) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	o := res.o
	share := float64(res.bytes) / float64(o.parts)
	p("%s\n\n", trafficHeading)
	p("K=%d simulated nodes: %d separate mounts of one S3 bucket (versitygw on 127.0.0.1, standing in for\n", o.parts, o.parts)
	p("shared storage), each with its own `--disk-cache` of (1+Q)·N/K bytes of blocks (plus %d bytes per\n", trafficEntryAllowance)
	p("entry for its header and key: `--disk-cache-size` counts whole entry files), each reading only its own\n")
	p("part, epochs 0 to %d back to back with `cat`, as a trainer does (`--strategy local` for Q=0, `pls\n", o.epochs-1)
	p("--exchange Q` otherwise; seed 1, `--partition random`, %d at a time). Dataset: N = %s of TFRecord\n", o.concurrent, fmtBytes(res.bytes))
	p("(%d records, 16 files) in %d blocks of %s. Fetched: `epochs[e].source_bytes` of\n", res.records, res.blocks, fmtBytes(o.block))
	p("`.corgifs/stats.json` (the bytes GET from the bucket for epoch e's buffers); peak: `disk_cache.peak_bytes_held`\n")
	p("(entry files, headers included).\n\n")
	p("Simulated: the same plans (the same index, built here, and the planner of the mounts; every part\n")
	p("file's size equal to its plan's: %v) played through bench --simulate's Belady cache of (1+Q)·N/K\n", allPlanned(res))
	p("bytes; and `bench --simulate` itself on a synthetic index of N in blocks of %s (one file, equal\n", fmtBytes(o.block))
	p("blocks), the command below. The simulator knows each node's whole future (all %d epochs); the disk\n", o.epochs)
	p("cache knows the plans of the parts opened on its mount for the current epoch and the next %d, and\n", 2)
	p("admits a block only as the writer goroutines get to it (a block turned away is counted in\n")
	p("`write_skipped`).\n\n")
	p("Reproduce (FUSE and versitygw on PATH; took %s; load average before %s, after %s):\n\n", res.took.Round(time.Second), res.load[0], res.load[1])
	p("    go run ./bench --warm=false --traffic --traffic-size %s --traffic-block %s --traffic-parts %d --traffic-exchange %s --traffic-epochs %d\n\n",
		formatSize(o.size), formatSize(o.block), o.parts, joinFloats(o.exchanges), o.epochs)
	p("and the simulation alone:\n\n")
	p("    go run ./bench --warm=false --simulate --sim-size %s --sim-block %s --sim-parts %d --sim-exchange %s --sim-epochs %d\n\n",
		formatSize(res.bytes), formatSize(o.block), o.parts, joinFloats(o.exchanges), o.epochs)
	p("| Q | epoch | Q·N/K | fetched per node, mean | min–max | × Q·N/K | simulated, these plans | measured ÷ simulated | `--simulate` (synthetic) | measured ÷ `--simulate` | from the disk cache, mean | from memory, mean |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range res.rows {
		for e := range o.epochs {
			var sum, disk, mem float64
			lo, hi := int64(math.MaxInt64), int64(0)
			for _, n := range r.nodes {
				sum += float64(n.fetched[e])
				disk += float64(n.disk[e]) / float64(len(r.nodes))
				mem += float64(n.memory[e]) / float64(len(r.nodes))
				lo, hi = min(lo, n.fetched[e]), max(hi, n.fetched[e])
			}
			mean := sum / float64(len(r.nodes))
			ratio := "–"
			if e > 0 && r.q > 0 {
				ratio = fmt.Sprintf("%.2f", mean/(r.q*share))
			}
			p("| %g | %d | %s | %s | %s–%s | %s | %s | %s | %s | %s | %s | %s |\n", r.q, e, fmtBytes(int64(r.q*share)), fmtBytes(int64(mean)),
				fmtBytes(lo), fmtBytes(hi), ratio, fmtBytes(int64(r.sim.fetchMean[e])), quotient(mean, r.sim.fetchMean[e]),
				fmtBytes(int64(synthAt(r.synth, e))), quotient(mean, synthAt(r.synth, e)), fmtBytes(int64(disk)), fmtBytes(int64(mem)))
		}
	}
	p("\n| Q | (1+Q)·N/K | `--disk-cache-size` | peak cache, largest node | ÷ (1+Q)·N/K | simulated peak | evictions per node, mean | not admitted | write skipped |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range res.rows {
		var peak, ev, refused, skipped int64
		for _, n := range r.nodes {
			peak = max(peak, n.peak)
			ev += n.evictions
			refused += n.refused
			skipped += n.skipped
		}
		p("| %g | %s | %s | %s | %.3f | %s | %.0f | %d | %d |\n", r.q, fmtBytes(r.capacity), fmtBytes(r.cacheArg), fmtBytes(peak),
			float64(peak)/float64(r.capacity), fmtBytes(r.sim.peak), float64(ev)/float64(len(r.nodes)), refused, skipped)
	}
	return b.String()
}

func allPlanned(res *trafficResults) bool {
	for _, r := range res.rows {
		if !r.planned {
			return false
		}
	}
	return true
}

func synthAt(v []float64, e int) float64 {
	if e < len(v) {
		return v[e]
	}
	return 0
}

// quotient formats a/b, or – when b is 0 (and so is a: both fetch
// nothing) or a is 0.
func quotient(a, b float64) string {
	if b == 0 {
		if a == 0 {
			return "= (0)"
		}
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}
