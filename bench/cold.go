//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/dustin/go-humanize"
)

const coldHeading = "## Cold-cache epoch read (issue 4)"

// coldTarget is one command of the cold section.
type coldTarget struct {
	name     string
	short    string
	strategy string // corgifs only
	d        *daemon
	corgifs  bool
	run      func(ctx context.Context, r int) (secs float64, err error)
	mbps     []float64
	cpu      float64 // daemon CPU seconds over the timed runs
	waited   []float64
	usage    daemonUsage
}

type coldResults struct {
	targets []*coldTarget
	load    [2]string
}

func (c *coldResults) get(short string) *coldTarget {
	for _, t := range c.targets {
		if t.short == short {
			return t
		}
	}
	return nil
}

// runCold times one epoch with the page cache dropped before each run: cat
// of the source files, the loopback, corgifs corgipile, none, full and mrs (K=1),
// and randread (a pread per record, uniformly random order) on the source.
func (e *runEnv) runCold(ctx context.Context) error {
	order := filepath.Join(e.work, "order-none.txt")
	var out bytes.Buffer
	if _, err := timeCmd(ctx, &out, e.bins.corgifs, "order", e.ds.dir, "--strategy", "none", "--seed", "1",
		"--cache-dir", filepath.Join(e.work, "cache")); err != nil {
		return err
	}
	if err := os.WriteFile(order, out.Bytes(), 0o644); err != nil {
		return err
	}

	res := &coldResults{}
	var daemons []*daemon
	defer func() {
		for _, d := range daemons {
			d.kill()
		}
	}()
	catFiles := func(files func(r int) []string) func(context.Context, int) (float64, error) {
		return func(ctx context.Context, r int) (float64, error) {
			return timeCmd(ctx, nil, append([]string{"cat"}, files(r)...)...)
		}
	}
	res.targets = append(res.targets, &coldTarget{name: "`cat` of the source files", short: "cat",
		run: catFiles(func(int) []string { return e.ds.paths() })})
	lb, err := e.mountLoopback(ctx, "cold-loopback")
	if err != nil {
		return err
	}
	daemons = append(daemons, lb)
	res.targets = append(res.targets, &coldTarget{name: "go-fuse loopback, reads served by the daemon", short: "loopback", d: lb,
		run: catFiles(func(int) []string {
			p := make([]string, len(e.ds.Files))
			for i, f := range e.ds.Files {
				p[i] = filepath.Join(lb.mnt, f)
			}
			return p
		})})
	for _, s := range []string{"corgipile", "none", "full", "mrs"} {
		d, err := e.mountCorgifs(ctx, "cold-"+s, "", "--strategy", s)
		if err != nil {
			return err
		}
		daemons = append(daemons, d)
		name := fmt.Sprintf("corgifs `--strategy %s`, K=1", s)
		switch s {
		case "full":
			name += " (a pread per record, in the daemon)"
		case "mrs":
			name += " (Bismarck's reservoir; a pread per record, in the daemon)"
		}
		// Run r reads epoch 2r: reading epoch e prefetches the first buffer
		// of e+1, which no run reads.
		res.targets = append(res.targets, &coldTarget{name: name, short: s, strategy: s, d: d, corgifs: true,
			run: catFiles(func(r int) []string { return []string{partPath(d.mnt, 2*r, 0, 1)} })})
	}
	res.targets = append(res.targets, &coldTarget{name: "`randread`: a pread per record on the source files, 4 goroutines", short: "randread",
		run: func(ctx context.Context, r int) (float64, error) {
			var out bytes.Buffer
			if _, err := timeCmd(ctx, &out, e.bins.randread, "--workers", "4", "--seed", fmt.Sprint(r), e.ds.dir, order); err != nil {
				return 0, err
			}
			var v struct {
				Bytes   int64   `json:"bytes"`
				Seconds float64 `json:"seconds"`
			}
			if err := json.Unmarshal(out.Bytes(), &v); err != nil {
				return 0, fmt.Errorf("randread: %w", err)
			}
			if v.Bytes != e.ds.Bytes {
				return 0, fmt.Errorf("randread read %d bytes, the dataset has %d", v.Bytes, e.ds.Bytes)
			}
			return v.Seconds, nil
		}})

	if _, err := exec.LookPath("fio"); err == nil {
		res.targets = append(res.targets, &coldTarget{name: "fio: random 8 MiB direct reads of the source files, 32 in flight (the disk's ceiling)", short: "device",
			run: func(ctx context.Context, r int) (float64, error) {
				fr, err := e.fioJob(ctx, "device-rand-8m", strings.Join(e.ds.paths(), ":"))
				if err != nil {
					return 0, err
				}
				// The time to read the dataset at the rate measured.
				return float64(e.ds.Bytes) / fr.mbps / 1e6, nil
			}})
	}

	res.load[0] = loadAverage()
	n := len(res.targets)
	for r := 1; r <= e.o.runs; r++ {
		for i := range n {
			t := res.targets[(i+r-1)%n]
			var cpu0 float64
			var st0 *api.Stats
			if t.d != nil {
				if cpu0, err = cpuSeconds(t.d.pid()); err != nil {
					return err
				}
			}
			if t.corgifs {
				if st0, err = corgifsStats(t.d.mnt); err != nil {
					return err
				}
			}
			if err := dropCaches(); err != nil {
				return err
			}
			secs, err := t.run(ctx, r)
			if err != nil {
				return fmt.Errorf("cold run %d of %s: %w", r, t.name, err)
			}
			t.mbps = append(t.mbps, float64(e.ds.Bytes)/secs/1e6)
			if t.d != nil {
				cpu1, err := cpuSeconds(t.d.pid())
				if err != nil {
					return err
				}
				t.cpu += cpu1 - cpu0
			}
			if t.corgifs {
				st1, err := corgifsStats(t.d.mnt)
				if err != nil {
					return err
				}
				t.waited = append(t.waited, (st1.StallSeconds-st0.StallSeconds)/secs)
			}
			e.logf("cold run %d/%d  %-50s %6.0f MB/s (%.2fs)", r, e.o.runs, t.short, t.mbps[len(t.mbps)-1], secs)
		}
	}
	res.load[1] = loadAverage()
	for _, t := range res.targets {
		if t.d == nil {
			continue
		}
		u, err := stopDaemon(t.d, t.corgifs)
		if err != nil {
			return err
		}
		u.cpu, u.served = t.cpu, e.ds.Bytes*int64(e.o.runs)
		t.usage = u
	}
	e.cold = res
	return nil
}

func (h *harness) coldMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", coldHeading)
	p("One epoch read with nothing of the dataset in memory: `sync; echo 3 >\n")
	p("/proc/sys/vm/drop_caches` before every run, so the source comes from the disk and every\n")
	p("daemon starts from a cold page cache (a corgifs daemon keeps no loaded buffer of the epoch\n")
	p("it is asked for: run r reads epoch 2r, and only the first two buffers of the next epoch are\n")
	p("ever prefetched). For each dataset in turn the commands alternate round-robin, %d runs each;\n", h.o.runs)
	p("`cat FILES > /dev/null` is timed from start to exit. The map-style alternative, every record\n")
	p("read with its own `pread` in a uniformly random order, is measured twice: corgifs `--strategy full`\n")
	p("read by `cat` (the daemon issues the preads, 4 at a time), and `bench/randread` on the source files\n")
	p("(4 goroutines like DataLoader workers, record list from `corgifs order SRC --strategy none`,\n")
	p("timed from its first pread to its last, so parsing and shuffling the list are not counted).\n")
	p("The disk's own ceiling is measured in the same rotation with fio (`bench/fio/device-rand-8m.fio`,\n")
	p("%s each): random 8 MiB reads with O_DIRECT, 32 in flight, as the loader reads blocks.\n\n", h.o.fioRuntime)
	p("%s", h.sectionRest(took, sectionCommand(h.o, "--cold"), (*runEnv).coldBody))
	return b.String()
}

// coldBody is the part of the cold section about one dataset.
func (e *runEnv) coldBody() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	res := e.cold
	gb := float64(e.ds.Bytes) / 1e9
	cat, rr := summarize(res.get("cat").mbps), summarize(res.get("randread").mbps)

	p("#### Setup\n\n%s", datasetLine(e.ds))
	p("- corgifs: `corgifs mount SRC MNT --strategy S --seed 1` (K=1, block 8 MiB, buffer 5%%, --max-memory 1 GiB),\n")
	p("  index built before; the loopback as in the warm section. Kernel readahead of the source: %s KiB.\n", readaheadKB(e.ds.dir))
	p("%s\n", loadLine(res.load))

	p("#### Throughput\n\n")
	p("| command (one epoch, %.2f GB, cold page cache) | median MB/s | min–max MB/s | × `cat` of source | × randread | runs in order, MB/s |\n", gb)
	p("| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, t := range res.targets {
		d := summarize(t.mbps)
		p("| %s | %.0f | %.0f–%.0f | %.2f | %.2f | %s |\n", t.name, d.med, d.lo, d.hi, d.med/cat.med, d.med/rr.med, join(t.mbps, "%.0f"))
	}
	p("\n#### Daemons\n\n")
	p("CPU is utime+stime during the %d timed runs per GiB served. \"Waited\" is the growth of\n", e.o.runs)
	p("`stall_seconds` in `.corgifs/stats.json` (time FUSE requests spent waiting for a buffer or a\n")
	p("record to be read from SRC) over the epoch's wall time, median of the runs: requests in flight\n")
	p("at once each count, so it can exceed 100%%.\n\n")
	p("| daemon | peak RSS | --max-memory | loader peak | CPU s per GiB | read from SRC / served | waited (median, min–max) |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, t := range res.targets {
		if t.d == nil {
			continue
		}
		u := t.usage
		if !t.corgifs {
			p("| %s | %s | – | – | %.2f | – | – |\n", t.short, humanize.IBytes(uint64(u.rss)), u.cpuPerGiB())
			continue
		}
		w := summarize(t.waited)
		p("| corgifs %s | %s | %s | %s | %.2f | %.3f | %.1f%% (%.1f–%.1f%%) |\n", t.strategy, humanize.IBytes(uint64(u.rss)),
			humanize.IBytes(uint64(u.config.MaxMemory)), humanize.IBytes(uint64(u.stats.MemoryPeak)), u.cpuPerGiB(),
			float64(u.stats.BytesRead)/float64(e.ds.Bytes*int64(e.o.runs)), 100*w.med, 100*w.lo, 100*w.hi)
	}
	cp, none, full := summarize(res.get("corgipile").mbps), summarize(res.get("none").mbps), summarize(res.get("full").mbps)
	lbk := summarize(res.get("loopback").mbps)
	p("\n#### Observations\n\n")
	p("With a cold page cache corgipile read an epoch at %.0f MB/s: %.2f× `cat` of the source files (%.0f MB/s), "+
		"%.2f× the loopback (%.0f MB/s), %.2f× `--strategy none` (%.0f MB/s). "+
		"A pread per record in a random order ran at %.0f MB/s through corgifs (`full`) and %.0f MB/s directly on the "+
		"source files (randread): corgipile read %.1f× and %.1f× as fast.\n",
		cp.med, cp.med/cat.med, cat.med, cp.med/lbk.med, lbk.med, cp.med/none.med, none.med,
		full.med, rr.med, cp.med/full.med, cp.med/rr.med)
	if dev := res.get("device"); dev != nil {
		d := summarize(dev.mbps)
		p("The disk itself gave fio's random 8 MiB direct reads %.0f MB/s (%.0f–%.0f): corgipile read at %.2f× that, "+
			"and 10× the pread per record on the source files would be %.0f MB/s, %.2f× what the disk delivers.\n",
			d.med, d.lo, d.hi, cp.med/d.med, 10*rr.med, 10*rr.med/d.med)
	}
	return b.String()
}
