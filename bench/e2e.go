//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

const e2eHeading = "## End to end against Shuffle Once (issue 4)"

// e2eEpochs is the largest E measured; E=1 is the prefix of the same runs.
const e2eEpochs = 3

type e2eResults struct {
	copySecs, indexSecs []float64   // shuffle copy; mount with the index built from scratch
	copyRead, corgi     [][]float64 // per run, the seconds of each epoch
	usage               daemonUsage
	load                [2]string
}

// totals returns, per run, setup plus the first E epochs.
func totals(setup []float64, epochs [][]float64, E int) []float64 {
	v := make([]float64, len(epochs))
	for r, ep := range epochs {
		if setup != nil {
			v[r] = setup[r]
		}
		for _, s := range ep[:E] {
			v[r] += s
		}
	}
	return v
}

// runE2E compares, cold, making a shuffled copy with bench/shufflecopy and
// reading it E times against mounting corgifs (building the index from
// scratch) and reading E corgipile epochs.
func (e *runEnv) runE2E(ctx context.Context) error {
	res := &e2eResults{}
	copyDir := filepath.Join(e.work, "shuffled-copy")
	cacheDir := filepath.Join(e.work, "e2e-cache")
	var cpu float64
	var served int64

	shuffleOnce := func(r int) error {
		if err := os.RemoveAll(copyDir); err != nil {
			return err
		}
		if err := dropCaches(); err != nil {
			return err
		}
		secs, err := timeCmd(ctx, nil, append([]string{e.bins.shufflecopy, "--seed", fmt.Sprint(r), copyDir}, e.ds.paths()...)...)
		if err != nil {
			return err
		}
		res.copySecs = append(res.copySecs, secs)
		var files []string
		for i := range dataFiles {
			files = append(files, filepath.Join(copyDir, fmt.Sprintf("shuffled-%05d-of-%05d.tfrecord", i, dataFiles)))
		}
		var eps []float64
		for range e2eEpochs {
			if err := dropCaches(); err != nil {
				return err
			}
			s, err := timeCmd(ctx, nil, append([]string{"cat"}, files...)...)
			if err != nil {
				return err
			}
			eps = append(eps, s)
		}
		res.copyRead = append(res.copyRead, eps)
		e.logf("e2e run %d/%d  shuffle once: copy %.2fs, epochs %s s", r, e.o.runs, secs, join(eps, "%.2f"))
		return os.RemoveAll(copyDir)
	}
	corgi := func(r int) error {
		if err := os.RemoveAll(cacheDir); err != nil {
			return err
		}
		if err := dropCaches(); err != nil {
			return err
		}
		t0 := time.Now()
		d, err := e.mountCorgifs(ctx, "e2e-corgipile", cacheDir, "--strategy", "corgipile")
		if err != nil {
			return err
		}
		res.indexSecs = append(res.indexSecs, time.Since(t0).Seconds())
		cpu0, err := cpuSeconds(d.pid())
		if err != nil {
			d.kill()
			return err
		}
		var eps []float64
		for ep := range e2eEpochs {
			if err := dropCaches(); err != nil {
				d.kill()
				return err
			}
			s, err := timeCmd(ctx, nil, "cat", partPath(d.mnt, ep, 0, 1))
			if err != nil {
				d.kill()
				return err
			}
			eps = append(eps, s)
		}
		cpu1, err := cpuSeconds(d.pid())
		if err != nil {
			d.kill()
			return err
		}
		cpu += cpu1 - cpu0
		served += e.ds.Bytes * e2eEpochs
		u, err := stopDaemon(d, true)
		if err != nil {
			return err
		}
		if u.rss > res.usage.rss {
			res.usage = u
		}
		res.corgi = append(res.corgi, eps)
		e.logf("e2e run %d/%d  corgifs: mount with indexing %.2fs, epochs %s s", r, e.o.runs, res.indexSecs[len(res.indexSecs)-1], join(eps, "%.2f"))
		return nil
	}

	res.load[0] = loadAverage()
	for r := 1; r <= e.o.runs; r++ {
		steps := []func(int) error{shuffleOnce, corgi}
		if r%2 == 0 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, f := range steps {
			if err := f(r); err != nil {
				return fmt.Errorf("end-to-end run %d: %w", r, err)
			}
		}
	}
	res.load[1] = loadAverage()
	res.usage.cpu, res.usage.served = cpu, served
	e.e2e = res
	return nil
}

func (h *harness) e2eMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", e2eHeading)
	p("What a user pays, from the unshuffled dataset on disk, to train E epochs. Shuffle Once:\n")
	p("`bench/shufflecopy` reads every source file, checks every record's CRCs, shuffles the\n")
	p("records in memory (uniformly) and writes them into %d new files, fsync'ed; then `cat` reads\n", dataFiles)
	p("the copy E times. corgifs: `corgifs mount` with an empty index cache, so the time to mount\n")
	p("includes indexing (reading every byte and checking every CRC), then `cat` reads E corgipile\n")
	p("epochs (K=1). **Cold**: the page cache is dropped before the copy, before the mount and\n")
	p("before every epoch, as for a dataset larger than memory. E=1 is the start of the same runs\n")
	p("as E=%d. For each dataset in turn the two pipelines alternate, %d runs each.\n\n", e2eEpochs, h.o.runs)
	p("%s", h.sectionRest(took, sectionCommand(h.o, "--e2e"), (*runEnv).e2eBody))
	return b.String()
}

// e2eBody is the part of the end-to-end section about one dataset.
func (e *runEnv) e2eBody() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	res := e.e2e
	p("#### Setup\n\n%s", datasetLine(e.ds))
	p("- corgifs: `corgifs mount SRC MNT --strategy corgipile --seed 1 --cache-dir EMPTY` (K=1, block 8 MiB,\n")
	p("  buffer 5%%, --max-memory 1 GiB); mount time is measured from start until `.corgifs/config.json`\n")
	p("  is visible (polled every 50 ms).\n")
	p("%s\n", loadLine(res.load))

	copyE := func(E int) dist { return summarize(totals(res.copySecs, res.copyRead, E)) }
	corgiE := func(E int) dist { return summarize(totals(res.indexSecs, res.corgi, E)) }
	warmIx := func(E int) dist { return summarize(totals(nil, res.corgi, E)) }

	p("#### Time to train E epochs\n\n")
	p("| pipeline | E=1 median s | E=1 min–max | E=3 median s | E=3 min–max | Shuffle Once ÷ this, E=1 | E=3 |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	c1, c3 := copyE(1), copyE(e2eEpochs)
	for _, row := range []struct {
		name string
		f    func(int) dist
	}{
		{"Shuffle Once: shuffled copy, then read it E times", copyE},
		{"corgifs: mount (indexing from scratch), then E corgipile epochs", corgiE},
		{"corgifs, index already built: E corgipile epochs", warmIx},
	} {
		d1, d3 := row.f(1), row.f(e2eEpochs)
		p("| %s | %.2f | %.2f–%.2f | %.2f | %.2f–%.2f | %.2f | %.2f |\n", row.name, d1.med, d1.lo, d1.hi, d3.med, d3.lo, d3.hi, c1.med/d1.med, c3.med/d3.med)
	}
	p("\n#### Steps\n\n")
	p("| step | median s | min–max s | runs, s |\n| --- | ---: | ---: | ---: |\n")
	step := func(name string, v []float64) {
		d := summarize(v)
		p("| %s | %.2f | %.2f–%.2f | %s |\n", name, d.med, d.lo, d.hi, join(v, "%.2f"))
	}
	step("shufflecopy (read, check, shuffle, write, fsync)", res.copySecs)
	step("corgifs mount with indexing", res.indexSecs)
	for ep := range e2eEpochs {
		var a, c []float64
		for r := range res.corgi {
			a = append(a, res.copyRead[r][ep])
			c = append(c, res.corgi[r][ep])
		}
		step(fmt.Sprintf("epoch %d: `cat` of the shuffled copy", ep+1), a)
		step(fmt.Sprintf("epoch %d: corgifs corgipile epoch %d", ep+1, ep), c)
	}
	u := res.usage
	p("\nThe corgifs daemon used %.2f CPU seconds per GiB served over the epochs and peaked at %s resident\n", u.cpuPerGiB(), humanize.IBytes(uint64(u.rss)))
	p("(--max-memory %s, loader peak %s).\n\n", humanize.IBytes(uint64(u.config.MaxMemory)), humanize.IBytes(uint64(u.stats.MemoryPeak)))
	p("#### Observations\n\n")
	p("For one epoch corgifs (indexing included) took %.2f s against %.2f s for Shuffle Once (%.2f× faster); "+
		"for %d epochs %.2f s against %.2f s (%.2f×).\n", corgiE(1).med, c1.med, c1.med/corgiE(1).med, e2eEpochs, corgiE(e2eEpochs).med, c3.med, c3.med/corgiE(e2eEpochs).med)
	return b.String()
}
