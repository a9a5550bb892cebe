//go:build linux

package main

// The object store section of issue 25: a cold epoch through the mount
// against the best plain client of the same objects in the same run, and
// an epoch from --disk-cache against a cold epoch of the local directory.
// Every reader of a run goes in turn (alternated), so that the load of
// the shared machine weighs on each alike; the ratios are taken run by
// run.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/minio/minio-go/v7"
)

const s3SpeedHeading = "## Object store at the speed of a plain client (issue 25)"

// s3SpeedWhole and s3SpeedRanged are the parallelism of the plain
// client's two ways: 8 whole-object GETs at once (as issue 25's boto3
// baseline), and ranged GETs of the block size as many at once as
// corgifs's --s3-concurrency default.
const (
	s3SpeedWhole  = 8
	s3SpeedRanged = 24
)

// s3SpeedRun is one alternated run: MB/s of each reader, and the CPU
// seconds per GiB of the daemon and of the server for the mounts.
type s3SpeedRun struct {
	whole, ranged, mount, mount8, fill, disk, local float64
	mountCPU, mountSrvCPU, mount8CPU, mount8SrvCPU  float64
	// later is a cold epoch (page cache dropped, every block from the
	// store) read by the default mount after its first: its slabs are
	// recycled, not fresh memory the kernel must zero. full is a fresh
	// mount with --index full, whose buffers are served while they load.
	later, laterCPU, laterSrvCPU float64
	// remount is the first epoch of a new mount with the sidecar the
	// default mount left: its proven cuts and learned record counts (a
	// later training job on the same data).
	remount, remountCPU, remountSrvCPU float64
	// warm is the later epoch read again, from the daemon's memory (no
	// GETs): what the FUSE path and the reader cost alone.
	warm                      float64
	full, fullCPU, fullSrvCPU float64
	mapped, laterMapped       int64   // stats.json memory_mapped after the first epoch, and after the later one
	wholeSrvCPU, rangedSrvCPU float64 // the server's CPU seconds per GiB
	written, skipped, fetched int64
	waitSecs                  float64
	diskGETs                  int64
}

type s3SpeedResults struct {
	endpoint  string
	server    string // s3Versitygw or s3MinIO
	load      [2]string
	blockSize int64
	blocks    int
	runs      []s3SpeedRun
}

// rangedGETs reads every block-size range of the objects, in a shuffled
// order, n at a time, and returns the bytes read.
func (s *s3Server) rangedGETs(ctx context.Context, keys []string, sizes []int64, block int64, n int, seed uint64) (int64, error) {
	type rng struct {
		key     string
		off, sz int64
	}
	var all []rng
	for i, k := range keys {
		for off := int64(0); off < sizes[i]; off += block {
			all = append(all, rng{k, off, min(block, sizes[i]-off)})
		}
	}
	r := rand.New(rand.NewPCG(seed, 25))
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return atOnce(len(all), n, func(i int, buf []byte) (int64, error) {
		g := all[i]
		var o minio.GetObjectOptions
		o.SetRange(g.off, g.off+g.sz-1)
		obj, err := s.client.GetObject(ctx, s3Bucket, g.key, o)
		if err != nil {
			return 0, err
		}
		defer obj.Close()
		return io.CopyBuffer(io.Discard, struct{ io.Reader }{obj}, buf)
	})
}

// wholeGETs reads every object whole, n at a time.
func (s *s3Server) wholeGETs(ctx context.Context, keys []string, n int) (int64, error) {
	return atOnce(len(keys), n, func(i int, buf []byte) (int64, error) { return s.getWhole(ctx, keys[i], buf) })
}

// atOnce calls get(i, buf) for every i below count, n calls at a time in
// order of i, each worker with a buffer of its own; a worker stops at its
// first error. It returns the bytes the calls read in all.
func atOnce(count, n int, get func(i int, buf []byte) (int64, error)) (int64, error) {
	var next, total atomic.Int64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for i := next.Add(1) - 1; i < int64(count) && errs[w] == nil; i = next.Add(1) - 1 {
				m, err := get(int(i), buf)
				total.Add(m)
				errs[w] = err
			}
		})
	}
	wg.Wait()
	return total.Load(), errors.Join(errs...)
}

// runS3Speed measures issue 25's targets on one dataset, served by
// --s3-server (MinIO or versitygw) from this machine's disk.
func (e *runEnv) runS3Speed(ctx context.Context) error {
	dir := filepath.Join(e.work, "s3-speed")
	srv, err := startS3Server(ctx, dir, e.o.s3Server)
	if err != nil {
		return err
	}
	defer srv.stop()
	res := &s3SpeedResults{endpoint: srv.endpoint, server: srv.kind}
	e.s3speed = res
	e.logf("%s at %s; uploading the dataset", srv.kind, srv.endpoint)
	if err := srv.upload(ctx, e.ds); err != nil {
		return err
	}
	setS3Env(s3Access, s3Secret)
	url := "s3://" + s3Bucket + "/" + s3Prefix
	cache := filepath.Join(dir, "cache")
	keys := make([]string, len(e.ds.Files))
	sizes := make([]int64, len(e.ds.Files))
	for i, f := range e.ds.Files {
		keys[i] = s3Prefix + "/" + f
		fi, err := os.Stat(filepath.Join(e.ds.dir, f))
		if err != nil {
			return err
		}
		sizes[i] = fi.Size()
	}
	mbps := func(secs float64) float64 { return float64(e.ds.Bytes) / secs / 1e6 }
	gib := float64(e.ds.Bytes) / (1 << 30)
	mount := func(name string, args ...string) (*daemon, error) {
		mnt := filepath.Join(dir, "mnt", name)
		c := cache
		if slices.Contains(args, "full") {
			c += "-full" // its own sidecar, apart from the probed one
		}
		argv := append([]string{e.bins.corgifs, "mount", url, mnt, "--seed", "1", "--cache-dir", c, "--s3-endpoint", srv.endpoint}, args...)
		if e.o.profile {
			argv = append(argv, "--cpuprofile", filepath.Join(dir, "cpu-"+name+".pprof"))
		}
		if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
			return nil, err
		}
		return startDaemon(ctx, "corgifs "+name, mnt, filepath.Join(dir, "logs", name+".log"),
			filepath.Join(mnt, ".corgifs", "config.json"), argv...)
	}
	// cold reads epoch r through a fresh mount d with the page cache
	// dropped; it returns MB/s and the daemon's and the server's CPU
	// seconds per GiB, and leaves d mounted.
	cold := func(d *daemon, r int) (v, cpu, srvCPU float64, err error) {
		if err := dropCaches(); err != nil {
			d.kill()
			return 0, 0, 0, err
		}
		c0, _ := cpuSeconds(d.pid())
		s0, _ := cpuSeconds(srv.cmd.Process.Pid)
		secs, err := timeCmd(ctx, nil, "cat", partPath(d.mnt, r, 0, 1))
		if err != nil {
			d.kill()
			return 0, 0, 0, err
		}
		c1, _ := cpuSeconds(d.pid())
		s1, _ := cpuSeconds(srv.cmd.Process.Pid)
		return mbps(secs), (c1 - c0) / gib, (s1 - s0) / gib, nil
	}
	// The index, built once by a first mount at the block size the
	// sizing rule chooses for an object store.
	d, err := mount("index")
	if err != nil {
		return err
	}
	var c api.Config
	err = readJSON(api.ConfigPath(d.mnt), &c)
	if err := errors.Join(err, d.stop()); err != nil {
		return err
	}
	res.blockSize, res.blocks = c.BlockSize, c.Dataset.Blocks
	// The sidecar as the index left it (cuts probed; none proven, no
	// record count): every run's first epoch at the defaults starts from
	// it, as a first mount of the data does.
	probed := cache + "-probed"
	os.RemoveAll(probed)
	if err := os.CopyFS(probed, os.DirFS(cache)); err != nil {
		return err
	}
	res.load[0] = loadAverage()
	srvCPU := func() float64 { v, _ := cpuSeconds(srv.cmd.Process.Pid); return v }
	// plain times a read of the whole dataset by the plain client, cold:
	// its MB/s and the server's CPU seconds a GiB. read returns the bytes
	// it read, which must be the dataset's.
	plain := func(what string, read func() (int64, error)) (mb, cpu float64, err error) {
		if err := dropCaches(); err != nil {
			return 0, 0, err
		}
		s0, start := srvCPU(), time.Now()
		n, err := read()
		if err == nil && n != e.ds.Bytes {
			err = fmt.Errorf("%s read %d bytes, the dataset has %d", what, n, e.ds.Bytes)
		}
		if err != nil {
			return 0, 0, err
		}
		return mbps(time.Since(start).Seconds()), (srvCPU() - s0) / gib, nil
	}
	for r := range e.o.runs {
		var run s3SpeedRun
		// The plain client: whole objects, then ranged GETs of the block
		// size in a shuffled order.
		var err error
		run.whole, run.wholeSrvCPU, err = plain("whole-object GETs", func() (int64, error) { return srv.wholeGETs(ctx, keys, s3SpeedWhole) })
		if err != nil {
			return err
		}
		run.ranged, run.rangedSrvCPU, err = plain("ranged GETs", func() (int64, error) {
			return srv.rangedGETs(ctx, keys, sizes, res.blockSize, s3SpeedRanged, uint64(r))
		})
		if err != nil {
			return err
		}

		// corgifs at the defaults (a first epoch, then a later one of
		// the same mount: epoch r+2, none of whose buffers the first
		// prefetched), with --index full, and with 8 MiB blocks (each
		// fetched as ranged GETs of at most 2 MiB while GET slots are
		// free).
		mapped := func(d *daemon) int64 {
			var st struct {
				Mapped int64 `json:"memory_mapped"`
			}
			readJSON(filepath.Join(d.mnt, ".corgifs", "stats.json"), &st)
			return st.Mapped
		}
		for _, v := range []struct {
			name     string
			args     []string
			mbps     *float64
			cpu, srv *float64
		}{
			{"default", nil, &run.mount, &run.mountCPU, &run.mountSrvCPU},
			{"full", []string{"--index", "full"}, &run.full, &run.fullCPU, &run.fullSrvCPU},
			{"block8", []string{"--block-size", "8MiB"}, &run.mount8, &run.mount8CPU, &run.mount8SrvCPU},
		} {
			if v.name == "default" {
				os.RemoveAll(cache)
				if err := os.CopyFS(cache, os.DirFS(probed)); err != nil {
					return err
				}
			}
			d, err := mount(fmt.Sprintf("%s-%d", v.name, r), v.args...)
			if err != nil {
				return err
			}
			if *v.mbps, *v.cpu, *v.srv, err = cold(d, r); err != nil {
				return err
			}
			if v.name == "default" {
				run.mapped = mapped(d)
				if run.later, run.laterCPU, run.laterSrvCPU, err = cold(d, r+2); err != nil {
					return err
				}
				run.laterMapped = mapped(d)
				secs, err := timeCmd(ctx, nil, "cat", partPath(d.mnt, r+2, 0, 1))
				if err != nil {
					d.kill()
					return err
				}
				run.warm = mbps(secs)
			}
			if err := d.stop(); err != nil {
				return err
			}
			if v.name == "default" {
				if d, err = mount(fmt.Sprintf("remount-%d", r)); err != nil {
					return err
				}
				if run.remount, run.remountCPU, run.remountSrvCPU, err = cold(d, r+4); err != nil {
					return err
				}
				if err := d.stop(); err != nil {
					return err
				}
			}
		}

		// A first epoch through a new disk cache, then a remount that
		// reads the next epoch from it, against the local directory.
		dc := filepath.Join(dir, "diskcache")
		os.RemoveAll(dc)
		d, err = mount(fmt.Sprintf("fill-%d", r), "--disk-cache", dc)
		if err != nil {
			return err
		}
		if run.fill, _, _, err = cold(d, r); err != nil {
			return err
		}
		var st struct {
			SourceRequests int64 `json:"source_requests"`
			DiskCache      struct {
				Written      int64   `json:"written"`
				WriteSkipped int64   `json:"write_skipped"`
				WaitSecs     float64 `json:"write_wait_seconds"`
			} `json:"disk_cache"`
		}
		// The writes still queued finish within seconds.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err := readJSON(filepath.Join(d.mnt, ".corgifs", "stats.json"), &st); err != nil {
				d.kill()
				return err
			}
			if st.DiskCache.Written+st.DiskCache.WriteSkipped >= st.SourceRequests {
				break
			}
		}
		run.written, run.skipped, run.fetched, run.waitSecs = st.DiskCache.Written, st.DiskCache.WriteSkipped, st.SourceRequests, st.DiskCache.WaitSecs
		if err := d.stop(); err != nil {
			return err
		}
		d, err = mount(fmt.Sprintf("disk-%d", r), "--disk-cache", dc)
		if err != nil {
			return err
		}
		g0, err := srv.gets()
		if err != nil {
			d.kill()
			return err
		}
		if run.disk, _, _, err = cold(d, r+1); err != nil {
			return err
		}
		g1, err := srv.gets()
		if err := errors.Join(err, d.stop()); err != nil {
			return err
		}
		run.diskGETs = g1 - g0
		l, err := e.mountCorgifs(ctx, fmt.Sprintf("s3speed-local-%d", r), "")
		if err != nil {
			return err
		}
		if run.local, _, _, err = cold(l, r+1); err != nil {
			return err
		}
		if err := l.stop(); err != nil {
			return err
		}
		res.runs = append(res.runs, run)
		e.logf("run %d: %d whole GETs at once %.0f MB/s, %d ranged GETs at once %.0f MB/s, corgifs %.0f MB/s (later epoch %.0f, remount %.0f, --index full %.0f), 8 MiB blocks %.0f MB/s; "+
			"first epoch with --disk-cache %.0f MB/s (%d of %d written, %d skipped), from the disk cache %.0f MB/s (%d GETs), local %.0f MB/s",
			r, s3SpeedWhole, run.whole, s3SpeedRanged, run.ranged, run.mount, run.later, run.remount, run.full, run.mount8, run.fill, run.written, run.fetched, run.skipped,
			run.disk, run.diskGETs, run.local)
	}
	res.load[1] = loadAverage()
	return nil
}

func (h *harness) s3SpeedMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", s3SpeedHeading)
	var rs []string
	for _, v := range h.o.recordSizes {
		rs = append(rs, strings.ReplaceAll(fmtBytes(v), " ", ""))
	}
	p("Reproduce: `go run ./bench --s3speed --s3-server %s --size %s --record-sizes %s --runs %d` (as root; took %s).\n\n",
		h.o.s3Server, strings.ReplaceAll(fmtBytes(h.o.size), " ", ""), strings.Join(rs, ","), h.o.runs, took.Round(time.Second))
	p("Each run reads the same objects, in turn and cold (page cache dropped before each): %d whole-object GETs at once and "+
		"%d ranged GETs of the block size at once (minio-go, bench/s3speed.go), a fresh corgifs mount at the defaults (its first epoch, from the sidecar of a probed index and nothing else, then "+
		"a later epoch of the same mount, none of whose blocks the first prefetched: every block from the store again, into recycled slabs; then that epoch again, from the daemon's memory), a remount with the sidecar it left (cuts proven, record counts learned: a later job's first epoch), a fresh mount with `--index full` "+
		"(every block's record count known: a buffer is served while it loads), and one with "+
		"`--block-size 8MiB` (each block fetched as ranged GETs of at most 2 MiB at once, as many as GET slots are free), a first epoch through a new `--disk-cache`, "+
		"a remount reading the next epoch from it, and a cold epoch of the local directory. Ratios are taken within each run.\n\n",
		s3SpeedWhole, s3SpeedRanged)
	for _, e := range h.sets {
		res := e.s3speed
		if res == nil {
			continue
		}
		p("%s; %s on %s; block size %s (%d blocks); load %s → %s.\n\n", e.ds.label(), res.server, res.endpoint, fmtBytes(res.blockSize), res.blocks, res.load[0], res.load[1])
		p("| run | whole GETs MB/s (server CPU s/GiB) | ranged GETs MB/s (server) | corgifs first epoch MB/s | ÷ best plain | later epoch MB/s | ÷ best plain | it again, from memory MB/s | remount MB/s | ÷ best plain | `--index full` MB/s | ÷ best plain | 8 MiB blocks MB/s | ÷ best plain | CPU s/GiB daemon, server: first; later; remount; full; 8 MiB | slabs mapped MB: first, +later |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		var r1, rl, rr, rf, r8, rd []float64
		for i, r := range res.runs {
			best := max(r.whole, r.ranged)
			r1, rl, rr, rf, r8 = append(r1, r.mount/best), append(rl, r.later/best), append(rr, r.remount/best), append(rf, r.full/best), append(r8, r.mount8/best)
			p("| %d | %.0f (%.2f) | %.0f (%.2f) | %.0f | %.2f× | %.0f | %.2f× | %.0f | %.0f | %.2f× | %.0f | %.2f× | %.0f | %.2f× | %.2f, %.2f; %.2f, %.2f; %.2f, %.2f; %.2f, %.2f; %.2f, %.2f | %.0f, +%.0f |\n",
				i, r.whole, r.wholeSrvCPU, r.ranged, r.rangedSrvCPU, r.mount, r.mount/best, r.later, r.later/best, r.warm, r.remount, r.remount/best, r.full, r.full/best, r.mount8, r.mount8/best,
				r.mountCPU, r.mountSrvCPU, r.laterCPU, r.laterSrvCPU, r.remountCPU, r.remountSrvCPU, r.fullCPU, r.fullSrvCPU, r.mount8CPU, r.mount8SrvCPU,
				float64(r.mapped)/1e6, float64(r.laterMapped-r.mapped)/1e6)
		}
		p("\n| run | first epoch with --disk-cache MB/s | blocks written / fetched (skipped, wait s) | from the disk cache MB/s (GETs) | local cold MB/s | disk cache ÷ local |\n")
		p("|---|---|---|---|---|---|\n")
		for i, r := range res.runs {
			rd = append(rd, r.disk/r.local)
			p("| %d | %.0f | %d / %d (%d, %.1f) | %.0f (%d) | %.0f | %.2f× |\n",
				i, r.fill, r.written, r.fetched, r.skipped, r.waitSecs, r.disk, r.diskGETs, r.local, r.disk/r.local)
		}
		med := func(v []float64) string {
			v = slices.Clone(v)
			slices.Sort(v)
			return fmt.Sprintf("%.2f× (%.2f–%.2f)", v[len(v)/2], v[0], v[len(v)-1])
		}
		p("\nMedian (min–max) ratios to the best plain client: corgifs first epoch %s, a later epoch of the same mount %s, a remount's first epoch %s, `--index full` %s, 8 MiB blocks %s; disk cache ÷ local cold %s.\n\n",
			med(r1), med(rl), med(rr), med(rf), med(r8), med(rd))
	}
	return b.String()
}
