//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

const prefetchHeading = "## Double buffering: cold epoch time against --prefetch (issue 15)"

// The prefetch section's parameters: the depths compared (the default, 2,
// is the reference) and the size of the reader's reads.
var (
	prefetchDepths    = []int{0, 1, 2, 4}
	prefetchDefault   = 2
	prefetchReadSize  = 1 << 20
	prefetchWorkNames = []string{"no work", "waits ≈ I/O", "spins ≈ I/O"}
)

// The reader's kinds of work on each MiB (prefetchWorkNames).
const (
	noWork    = iota
	sleepWork // time.Sleep: a step on a GPU, the CPUs stay free
	spinWork  // a busy loop: a step on a CPU, which the daemon competes with
)

// prefetchRow is one depth read with one amount of work.
type prefetchRow struct {
	depth  int
	work   int // noWork, sleepWork or spinWork
	secs   []float64
	reads  []float64 // seconds the reader spent in read calls: the I/O it did not overlap
	waited []float64 // stall_seconds grown over the run / the run's seconds
}

type prefetchResults struct {
	rows     []*prefetchRow
	workPer  time.Duration // the reader's work per MiB in the rows with work
	calibSec float64       // the cold epoch without work that set workPer
	load     [2]string
}

func (r *prefetchResults) get(depth, work int) *prefetchRow {
	for _, x := range r.rows {
		if x.depth == depth && x.work == work {
			return x
		}
	}
	return nil
}

// runPrefetch mounts corgipile once per --prefetch depth and times cold
// epochs read by a reader that works on every MiB it reads for a fixed
// time, as a training step would: without work, and with as much work per
// MiB as the cold read of a MiB takes (calibrated first, with the default
// depth), where overlapping I/O with the work gains the most; the work
// either waits (a step on a GPU) or spins a CPU (a step on the CPU, which
// the daemon then competes with). The page cache is dropped before every
// run.
func (e *runEnv) runPrefetch(ctx context.Context) error {
	res := &prefetchResults{}
	mounts := map[int]*daemon{}
	epochs := map[int]int{} // the next epoch to read from each mount: each is read once
	defer func() {
		for _, d := range mounts {
			d.kill()
		}
	}()
	for _, depth := range prefetchDepths {
		d, err := e.mountCorgifs(ctx, fmt.Sprintf("prefetch-%d", depth), "", "--strategy", "corgipile", "--prefetch", fmt.Sprint(depth))
		if err != nil {
			return err
		}
		mounts[depth] = d
	}
	read := func(depth, kind int, work time.Duration) (secs, reads, waited float64, err error) {
		d := mounts[depth]
		epoch := epochs[depth]
		// Two apart: reading epoch e prefetches the first buffers of e+1.
		epochs[depth] += 2
		st0, err := corgifsStats(d.mnt)
		if err != nil {
			return 0, 0, 0, err
		}
		if err := dropCaches(); err != nil {
			return 0, 0, 0, err
		}
		start := time.Now()
		n, reads, err := readWorking(ctx, partPath(d.mnt, epoch, 0, 1), kind, work)
		secs = time.Since(start).Seconds()
		if err != nil {
			return 0, 0, 0, err
		}
		if n != e.ds.Bytes {
			return 0, 0, 0, fmt.Errorf("--prefetch %d: read %d bytes of epoch %d, the dataset has %d", depth, n, epoch, e.ds.Bytes)
		}
		st1, err := corgifsStats(d.mnt)
		if err != nil {
			return 0, 0, 0, err
		}
		return secs, reads, (st1.StallSeconds - st0.StallSeconds) / secs, nil
	}
	calib, _, _, err := read(prefetchDefault, noWork, 0)
	if err != nil {
		return err
	}
	res.calibSec = calib
	res.workPer = time.Duration(calib / (float64(e.ds.Bytes) / (1 << 20)) * float64(time.Second))
	e.logf("prefetch: a cold epoch takes %.2fs without work: %s of work per MiB", calib, res.workPer)
	for w := range prefetchWorkNames {
		for _, depth := range prefetchDepths {
			res.rows = append(res.rows, &prefetchRow{depth: depth, work: w})
		}
	}
	res.load[0] = loadAverage()
	n := len(res.rows)
	for r := 1; r <= e.o.runs; r++ {
		for i := range n {
			row := res.rows[(i+r-1)%n]
			secs, reads, waited, err := read(row.depth, row.work, res.workPer)
			if err != nil {
				return fmt.Errorf("prefetch run %d: %w", r, err)
			}
			row.secs = append(row.secs, secs)
			row.reads = append(row.reads, reads)
			row.waited = append(row.waited, waited)
			e.logf("prefetch run %d/%d  --prefetch %d, %-11s %6.2fs, %5.2fs in reads, waited %.0f%%", r, e.o.runs, row.depth, prefetchWorkNames[row.work], secs, reads, 100*waited)
		}
	}
	res.load[1] = loadAverage()
	e.prefetch = res
	return nil
}

// readWorking reads path to its end in prefetchReadSize reads, working
// (kind) for work per MiB after each, and returns the bytes read and the
// seconds spent in reads.
func readWorking(ctx context.Context, path string, kind int, work time.Duration) (total int64, reads float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	buf := make([]byte, prefetchReadSize)
	var inReads time.Duration
	for {
		if err := ctx.Err(); err != nil {
			return total, 0, err
		}
		start := time.Now()
		m, err := io.ReadFull(f, buf)
		inReads += time.Since(start)
		total += int64(m)
		d := time.Duration(float64(work) * float64(m) / (1 << 20))
		switch kind {
		case sleepWork:
			time.Sleep(d)
		case spinWork:
			spin(d)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return total, inReads.Seconds(), nil
		}
		if err != nil {
			return total, 0, err
		}
	}
}

// spin keeps a CPU busy for d, as a training step that uses the bytes
// would, rather than sleeping: the daemon competes with it for the CPUs.
func spin(d time.Duration) {
	var x uint64
	for start := time.Now(); time.Since(start) < d; {
		for i := range 1000 {
			x = x*6364136223846793005 + uint64(i)
		}
	}
	runtime.KeepAlive(x) // x is used: the compiler keeps the loop
}

func (h *harness) prefetchMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", prefetchHeading)
	p("The CorgiPile paper's double buffering: the next buffers of a part are loaded while a reader\n")
	p("works on the one it is in (its gain in PostgreSQL: up to 23.6%% per epoch). One corgifs mount\n")
	p("per `--prefetch N` (`--strategy corgipile`, K=1, default buffer and --max-memory); a reader in\n")
	p("the benchmark process reads one epoch's part in 1 MiB reads and, after each, works for a fixed\n")
	p("time per MiB, as a training step would: no work at all, or as much work per MiB as a cold read\n")
	p("of a MiB took (calibrated by one cold epoch of the default mount without work before the timed\n")
	p("runs), where overlapping I/O and work gains the most (at best an epoch of max(I/O, work)\n")
	p("instead of I/O + work). The work either waits (`time.Sleep`: a step on a GPU, the CPUs stay\n")
	p("free for the daemon) or spins a CPU (a step on the CPU, which the daemon competes with).\n")
	p("`sync; echo 3 > /proc/sys/vm/drop_caches` before every run; each run\n")
	p("reads an epoch its mount has not read, and the runs alternate round-robin, %d each.\n", h.o.runs)
	p("\"× default\" is the median epoch time over that of `--prefetch %d` with the same work, in the\n", prefetchDefault)
	p("same run; \"in reads\" is the time the reader spent in read calls, the I/O it did not overlap\n")
	p("with its work (the work itself is noisy on a busy machine: a sleep overshoots); \"waited\" is\n")
	p("the growth of `stall_seconds` in stats.json over the epoch's time.\n\n")
	p("%s", h.sectionRest(took, sectionCommand(h.o, "--prefetch"), (*runEnv).prefetchBody))
	return b.String()
}

// prefetchBody is the part of the prefetch section about one dataset.
func (e *runEnv) prefetchBody() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	res := e.prefetch
	p("#### Setup\n\n%s", datasetLine(e.ds))
	p("- Work per MiB in the rows with work: %s (a cold epoch without work took %.2f s before the timed runs).\n",
		res.workPer.Round(time.Microsecond), res.calibSec)
	p("%s\n", loadLine(res.load))
	p("#### Epoch time\n\n")
	p("| reader | --prefetch | epoch s (median) | min–max s | × default | gain of the default over this | in reads s (median) | × default | waited (median) | epochs in order, s |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, row := range res.rows {
		d := summarize(row.secs)
		ref := summarize(res.get(prefetchDefault, row.work).secs)
		gain := "–"
		if row.depth != prefetchDefault {
			gain = fmt.Sprintf("%+.1f%%", 100*(1-ref.med/d.med))
		}
		rd, rref := summarize(row.reads), summarize(res.get(prefetchDefault, row.work).reads)
		p("| %s | %d | %.2f | %.2f–%.2f | %.2f | %s | %.2f | %.2f | %.0f%% | %s |\n", prefetchWorkNames[row.work], row.depth, d.med, d.lo, d.hi,
			d.med/ref.med, gain, rd.med, rd.med/rref.med, 100*summarize(row.waited).med, join(row.secs, "%.2f"))
	}
	return b.String()
}
