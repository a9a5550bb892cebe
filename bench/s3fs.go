//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/fs"
)

// The requests section (issue 25): the GETs and bytes per GiB served of
// one epoch read by a map-style reader through s3fs (s3fs-fuse, Debian's
// package, at its defaults), which reads the records one at a time in a
// shuffled order as a PyTorch map-style Dataset does, against `cat` of a
// corgifs part at the defaults. Same MinIO, same objects, counted by the
// server's metrics (and for corgifs also by its stats.json).

const s3fsHeading = "## GETs per GiB: corgifs against a per-record reader through s3fs (issue 25)"

// s3fsWorkers is the number of readers of the per-record reader: a
// DataLoader's num_workers, each reading its own records.
const s3fsWorkers = 8

// s3fsReopenSample is the number of records the reader that opens the
// file for each record reads.
const s3fsReopenSample = 1000

// requestRun is one epoch read, counted at the server.
type requestRun struct {
	name   string
	secs   float64
	served int64 // bytes the reader got
	server serverCounts
	// corgifs: stats.json's GETs and bytes of epoch 0, and the GETs of
	// the whole mount: the server's, and stats.json's (the index's, the
	// epochs', the proof walks').
	statsGETs, statsByte          int64
	mountGETs, statsTotal         int64
	indexGETs, nextGETs, proofGET int64
}

type s3fsResult struct {
	ds        *dataset
	blockSize int64
	runs      []requestRun
	load      [2]string
}

// runS3fs runs the section on the first --record-sizes dataset.
func runS3fs(ctx context.Context, o options, work, corgifs string) (*s3fsResult, error) {
	bin, err := exec.LookPath("s3fs")
	if err != nil {
		return nil, fmt.Errorf("no s3fs on PATH (apt-get install -y s3fs)")
	}
	rs := o.recordSizes[0]
	dir := filepath.Join(work, datasetDir(rs))
	ds, err := ensureDataset(ctx, dir, o.size, rs, os.Stderr)
	if err != nil {
		return nil, err
	}
	srv, err := startMinIO(ctx, filepath.Join(dir, "minio"))
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if err := srv.upload(ctx, "bench", "data", ds.paths()); err != nil {
		return nil, err
	}
	records, err := recordTable(ds.paths())
	if err != nil {
		return nil, err
	}
	res := &s3fsResult{ds: ds}
	res.load[0] = loadAverage()

	for r := range o.runs {
		for _, reopen := range []bool{false, true} {
			run, err := s3fsEpoch(ctx, srv, bin, dir, ds, records, uint64(r), reopen)
			if err != nil {
				return nil, err
			}
			res.runs = append(res.runs, run)
		}
		run, err := corgifsEpoch(ctx, srv, corgifs, dir, res)
		if err != nil {
			return nil, err
		}
		res.runs = append(res.runs, run)
	}
	res.load[1] = loadAverage()
	return res, nil
}

// record is one record of the dataset: file, offset and length.
type record struct {
	file     int
	off, len int64
}

// recordTable walks the TFRecord headers of the local copy.
func recordTable(paths []string) ([]record, error) {
	var out []record
	var h [8]byte
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		for off := int64(0); off < fi.Size(); {
			if _, err := f.ReadAt(h[:], off); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: header at offset %d: %w", p, off, err)
			}
			n := int64(binary.LittleEndian.Uint64(h[:])) + formats.FrameExtra
			out = append(out, record{file: i, off: off, len: n})
			off += n
		}
		f.Close()
	}
	return out, nil
}

// counted runs read between two readings of the server's counters.
func counted(ctx context.Context, srv *minioServer, name string, read func() (int64, error)) (requestRun, error) {
	r := requestRun{name: name}
	b, err := srv.counts(ctx)
	if err != nil {
		return r, err
	}
	start := time.Now()
	if r.served, err = read(); err != nil {
		return r, err
	}
	r.secs = time.Since(start).Seconds()
	a, err := srv.counts(ctx)
	if err != nil {
		return r, err
	}
	r.server = a.sub(b)
	return r, nil
}

// s3fsEpoch mounts the bucket with s3fs and reads every record once, in
// an order shuffled by seed, s3fsWorkers records at a time.
func s3fsEpoch(ctx context.Context, srv *minioServer, bin, dir string, ds *dataset, records []record, seed uint64, reopen bool) (requestRun, error) {
	mnt := filepath.Join(dir, "mnt", "s3fs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return requestRun{}, err
	}
	passwd := filepath.Join(dir, "s3fs-passwd")
	if err := os.WriteFile(passwd, []byte(minioAccess+":"+minioSecret+"\n"), 0o600); err != nil {
		return requestRun{}, err
	}
	if err := dropCaches(); err != nil {
		return requestRun{}, err
	}
	// In the foreground (-f), so that it is this process's child.
	cmd := exec.CommandContext(ctx, bin, "bench:/data", mnt, "-f", "-o", "url="+srv.endpoint, "-o", "use_path_request_style",
		"-o", "passwd_file="+passwd, "-o", "ro")
	logf, err := os.Create(filepath.Join(dir, "s3fs.log"))
	if err != nil {
		return requestRun{}, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return requestRun{}, err
	}
	defer func() {
		exec.Command("fusermount3", "-u", mnt).Run()
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	first := filepath.Join(mnt, ds.Files[0])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if typ, err := fs.MountType(mnt); err == nil && strings.Contains(typ, "s3fs") {
			if _, err := os.Stat(first); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			return requestRun{}, fmt.Errorf("s3fs did not mount %s within 30 s (its log: %s)", mnt, logf.Name())
		}
	}
	files := make([]*os.File, len(ds.Files))
	for i, f := range ds.Files {
		if files[i], err = os.Open(filepath.Join(mnt, f)); err != nil {
			return requestRun{}, err
		}
		defer files[i].Close()
	}
	order := make([]int, len(records))
	for i := range order {
		order[i] = i
	}
	rand.New(rand.NewPCG(seed, 25)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	name := "s3fs, per-record reader, files kept open"
	if reopen {
		// A Dataset that opens the file in __getitem__: s3fs keeps what
		// it fetched only while the file is open. A sample of the
		// epoch, since each record may cost a large GET.
		order = order[:min(len(order), s3fsReopenSample)]
		name = fmt.Sprintf("s3fs, per-record reader opening the file for each record (%d records)", len(order))
	}
	return counted(ctx, srv, name, func() (int64, error) {
		var next, served atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, s3fsWorkers)
		for w := range s3fsWorkers {
			wg.Go(func() {
				buf := make([]byte, 0, 1<<20)
				for i := next.Add(1) - 1; i < int64(len(order)); i = next.Add(1) - 1 {
					rec := records[order[i]]
					if int64(cap(buf)) < rec.len {
						buf = make([]byte, 0, rec.len)
					}
					f := files[rec.file]
					if reopen {
						var err error
						if f, err = os.Open(f.Name()); err != nil {
							errs[w] = err
							return
						}
					}
					n, err := f.ReadAt(buf[:rec.len], rec.off)
					if reopen {
						f.Close()
					}
					if err != nil && !(errors.Is(err, io.EOF) && int64(n) == rec.len) {
						errs[w] = fmt.Errorf("s3fs: %s: record at offset %d: %w", ds.Files[rec.file], rec.off, err)
						return
					}
					served.Add(int64(n))
				}
			})
		}
		wg.Wait()
		return served.Load(), errors.Join(errs...)
	})
}

// corgifsEpoch mounts the bucket with corgifs at the defaults (a new
// cache directory: the probe index is built again and counted apart) and
// reads epoch 0's one part with cat.
func corgifsEpoch(ctx context.Context, srv *minioServer, corgifs, dir string, res *s3fsResult) (requestRun, error) {
	cache, err := os.MkdirTemp(dir, "cache-")
	if err != nil {
		return requestRun{}, err
	}
	defer os.RemoveAll(cache)
	mnt := filepath.Join(dir, "mnt", "corgifs")
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return requestRun{}, err
	}
	if err := dropCaches(); err != nil {
		return requestRun{}, err
	}
	b, err := srv.counts(ctx)
	if err != nil {
		return requestRun{}, err
	}
	setS3Env(minioAccess, minioSecret)
	d, err := startDaemon(ctx, "corgifs", mnt, filepath.Join(dir, "logs", "corgifs-s3fs.log"), api.ConfigPath(mnt),
		corgifs, "mount", "s3://bench/data", mnt, "--seed", "1", "--cache-dir", cache, "--s3-endpoint", srv.endpoint)
	if err != nil {
		return requestRun{}, err
	}
	defer d.kill()
	var c api.Config
	if err := readJSON(api.ConfigPath(mnt), &c); err != nil {
		return requestRun{}, err
	}
	res.blockSize = c.BlockSize
	run, err := counted(ctx, srv, "corgifs, `cat` of the part", func() (int64, error) {
		f, err := os.Open(partPath(mnt, 0, 0, 1))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return io.CopyBuffer(io.Discard, f, make([]byte, 1<<20))
	})
	if err != nil {
		return run, err
	}
	// What the mount made in all, once its prefetches are done.
	var st struct {
		Epochs map[string]struct {
			SourceBytes int64 `json:"source_bytes"`
			SourceGETs  int64 `json:"source_gets"`
		} `json:"epochs"`
		ProofReads int64 `json:"proof_reads"`
		Source     struct {
			GETs int64 `json:"gets"`
		} `json:"source"`
	}
	for last := int64(-1); ; time.Sleep(time.Second) {
		if err := readJSON(api.StatsPath(mnt), &st); err != nil {
			return run, err
		}
		if st.Source.GETs == last {
			break
		}
		last = st.Source.GETs
	}
	a, err := srv.counts(ctx)
	if err != nil {
		return run, err
	}
	run.statsGETs, run.statsByte = st.Epochs["0"].SourceGETs, st.Epochs["0"].SourceBytes
	run.mountGETs, run.statsTotal, run.proofGET = a.gets-b.gets, st.Source.GETs, st.ProofReads
	var epochs int64
	for _, e := range st.Epochs {
		epochs += e.SourceGETs
	}
	run.nextGETs = epochs - run.statsGETs
	run.indexGETs = st.Source.GETs - epochs - st.ProofReads
	return run, d.stop()
}

func s3fsMarkdown(o options, res *s3fsResult, took time.Duration, m machine) string {
	var b strings.Builder
	gib := func(r requestRun) float64 { return float64(r.served) / (1 << 30) }
	fmt.Fprintf(&b, "%s\n\n", s3fsHeading)
	fmt.Fprintf(&b, "`go run ./bench --s3fs --size %s --record-sizes %s --runs %d`, %s, on %s. One epoch of a TFRecord dataset of %s (%s, %d objects) in MinIO on 127.0.0.1, the page cache dropped before each: "+
		"a map-style reader through an `s3fs` mount (s3fs-fuse from Debian at its defaults, `-o use_path_request_style,ro`) reading every record once with one `pread` each, in a shuffled order, %d at a time (a PyTorch map-style Dataset with %d DataLoader workers), its files kept open, and the first %d records of that order read opening the file for each (a Dataset that opens it in `__getitem__`), "+
		"against `cat` of the one part of a corgifs mount at the defaults (a probe index built at mount, block size %s). "+
		"GETs counted by the server (MinIO's metrics: GetObject requests; requests of every kind; bytes sent) while the epoch was read; for corgifs the GETs and bytes are its `stats.json` epoch 0 (`source_gets`, `source_bytes`), and the last column accounts for every GET the server saw from the mount's start to its end.\n\n",
		formatSize(o.size), (*sizesValue)(&o.recordSizes).String(), o.runs, time.Now().UTC().Format("2006-01-02"), m.cpu,
		res.ds.label(), fmtBytes(res.ds.Bytes), len(res.ds.Files), s3fsWorkers, s3fsWorkers, s3fsReopenSample, fmtBytes(res.blockSize))
	b.WriteString("| reader | epoch | GETs | GETs per GiB served | requests per GiB | bytes fetched per GiB served | server CPU s per GiB | every GET of the mount |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.runs {
		g := gib(r)
		if r.statsTotal == 0 {
			fmt.Fprintf(&b, "| %s | %.1f s | %d | %.0f | %.0f | %.2f GiB | %.2f | |\n", r.name, r.secs, r.server.gets, float64(r.server.gets)/g,
				float64(r.server.requests)/g, float64(r.server.sent)/(1<<30)/g, r.server.cpu/g)
			continue
		}
		fmt.Fprintf(&b, "| %s | %.1f s | %d | %.0f | %.0f | %.2f GiB | %.2f | server %d; stats.json %d = index %d + epoch 0 %d + prefetched of epoch 1 %d + proof walks %d |\n",
			r.name, r.secs, r.statsGETs, float64(r.statsGETs)/g, float64(r.server.requests)/g, float64(r.statsByte)/(1<<30)/g, r.server.cpu/g,
			r.mountGETs, r.statsTotal, r.indexGETs, r.statsGETs, r.nextGETs, r.proofGET)
	}
	fmt.Fprintf(&b, "\nLoad average %s before, %s after. The section took %s.\n", res.load[0], res.load[1], took.Round(time.Second))
	return b.String()
}
