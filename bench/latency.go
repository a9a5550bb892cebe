//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/corgifs/corgifs/api"
)

const latencyHeading = "## First byte, epoch boundary and reader waits (issue 4)"

// slowRead is the duration above which a reader-side read counts as a wait:
// a 1 MiB read served from a loaded buffer takes about a millisecond.
const slowRead = 10 * time.Millisecond

// boundaryRun is one reader going from epoch e to e+1.
type boundaryRun struct {
	epoch, first, boundary float64 // seconds: whole epoch e, its first read, open+first read of e+1
	stallAfterFirst        float64 // daemon stall_seconds after the first read of e, until its end
	slowAfterFirst         float64 // reader: seconds in reads slower than slowRead after the first
}

// after returns the time of the epoch after its first read.
func (b boundaryRun) after() float64 { return b.epoch - b.first }

type latResults struct {
	firstCold, firstWarm []float64
	cold, warm           []boundaryRun
	usage                daemonUsage
	buffer               int64
	load                 [2]string
}

// timeFirstByte opens path and reads its first 4 KiB, returning the time
// from before open to the end of the read.
func timeFirstByte(path string) (float64, error) {
	buf := make([]byte, 4096)
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := io.ReadFull(f, buf); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// readBoundary reads epoch e's part to its end with 1 MiB reads, then opens
// epoch e+1's part and reads 1 MiB.
func readBoundary(mnt string, e int) (boundaryRun, error) {
	var b boundaryRun
	buf := make([]byte, 1<<20)
	start := time.Now()
	f, err := os.Open(partPath(mnt, e, 0, 1))
	if err != nil {
		return b, err
	}
	var stFirst *api.Stats
	for i := 0; ; i++ {
		t := time.Now()
		_, err := f.Read(buf)
		d := time.Since(t)
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return b, err
		}
		if i == 0 {
			b.first = time.Since(start).Seconds()
			if stFirst, err = corgifsStats(mnt); err != nil {
				f.Close()
				return b, err
			}
			continue
		}
		if d > slowRead {
			b.slowAfterFirst += d.Seconds()
		}
	}
	f.Close()
	b.epoch = time.Since(start).Seconds()
	stEnd, err := corgifsStats(mnt)
	if err != nil {
		return b, err
	}
	b.stallAfterFirst = stEnd.StallSeconds - stFirst.StallSeconds
	t := time.Now()
	g, err := os.Open(partPath(mnt, e+1, 0, 1))
	if err != nil {
		return b, err
	}
	defer g.Close()
	if _, err := io.ReadFull(g, buf); err != nil {
		return b, err
	}
	b.boundary = time.Since(t).Seconds()
	dropPages([]string{partPath(mnt, e, 0, 1), partPath(mnt, e+1, 0, 1)})
	return b, nil
}

// runLatency measures, on one corgipile mount (K=1), the time to the first
// byte of an epoch never read before, cold and warm, and a reader going
// straight from epoch e to e+1: the stall at the boundary and the time it
// waited inside epoch e after its first buffer.
func (e *runEnv) runLatency(ctx context.Context) error {
	d, err := e.mountCorgifs(ctx, "latency-corgipile", "", "--strategy", "corgipile")
	if err != nil {
		return err
	}
	defer d.kill()
	res := &latResults{}
	cpu0, err := cpuSeconds(d.pid())
	if err != nil {
		return err
	}
	res.load[0] = loadAverage()
	for r := 1; r <= e.o.runs; r++ {
		for _, cold := range []bool{r%2 == 1, r%2 == 0} {
			if err := ctx.Err(); err != nil {
				return err
			}
			if cold {
				if err := dropCaches(); err != nil {
					return err
				}
			} else if _, err := timeCmd(ctx, nil, append([]string{"cat"}, e.ds.paths()...)...); err != nil {
				return err
			}
			// Epochs far apart: nothing of them is loaded or prefetched.
			base := 1000 + 100*r
			if !cold {
				base += 50
			}
			fb, err := timeFirstByte(partPath(d.mnt, base, 0, 1))
			if err != nil {
				return err
			}
			dropPages([]string{partPath(d.mnt, base, 0, 1)})
			if cold {
				if err := dropCaches(); err != nil {
					return err
				}
			}
			br, err := readBoundary(d.mnt, base+10)
			if err != nil {
				return err
			}
			mode := "warm"
			if cold {
				res.firstCold, res.cold, mode = append(res.firstCold, fb), append(res.cold, br), "cold"
			} else {
				res.firstWarm, res.warm = append(res.firstWarm, fb), append(res.warm, br)
			}
			e.logf("latency run %d/%d %s: first byte %.3fs; epoch %.2fs (first read %.3fs, stalls after %.3fs, slow reads %.3fs); boundary %.3fs",
				r, e.o.runs, mode, fb, br.epoch, br.first, br.stallAfterFirst, br.slowAfterFirst, br.boundary)
		}
	}
	res.load[1] = loadAverage()
	u, err := stopMeasured(d, cpu0)
	if err != nil {
		return err
	}
	res.usage = u
	res.buffer = u.config.BufferPart
	e.lat = res
	return nil
}

func (h *harness) latencyMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", latencyHeading)
	p("One corgifs mount per dataset, `--strategy corgipile` (K=1, block 8 MiB, --max-memory 1 GiB).\n")
	p("The reader is the benchmark process (not the daemon). **First byte**: open part 0 of an epoch\n")
	p("nobody read or prefetched and read 4 KiB — the daemon loads the whole first buffer first, so\n")
	p("this is also the time to load one buffer. **Boundary**: one reader reads epoch e to its end\n")
	p("with 1 MiB reads, then at once opens epoch e+1 and reads 1 MiB; the boundary stall is that\n")
	p("open and read. **Waits** inside epoch e after its first read: the growth of the daemon's\n")
	p("`stall_seconds` (stats.json) over the epoch's time after the first read (requests waiting at\n")
	p("the same time each count), and the reader's own time in reads slower than %s.\n", slowRead)
	p("**Cold**: the page cache dropped before the first-byte read and before epoch e; **warm**: the\n")
	p("source files read just before. Cold and warm alternate, %d runs each.\n\n", h.o.runs)
	p("%s", h.sectionRest(took, sectionCommand(h.o, "--latency"), (*runEnv).latencyBody))
	return b.String()
}

// latencyBody is the part of the latency section about one dataset.
func (e *runEnv) latencyBody() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	res := e.lat
	p("#### Setup\n\n%s", datasetLine(e.ds))
	p("- corgifs: a corgipile buffer holds %s.\n", fmtBytes(res.buffer))
	p("%s\n", loadLine(res.load))
	p("#### Results\n\n")
	p("| measure | cold median | cold min–max | warm median | warm min–max |\n| --- | ---: | ---: | ---: | ---: |\n")
	row := func(name, unit string, scale float64, c, w []float64) {
		dc, dw := summarize(c), summarize(w)
		f := "%.0f"
		if unit == "s" {
			f = "%.2f"
		}
		if unit == "%" {
			f = "%.2f"
		}
		v := func(x float64) string { return fmt.Sprintf(f, x*scale) + " " + unit }
		p("| %s | %s | %s–%s | %s | %s–%s |\n", name, v(dc.med), v(dc.lo), v(dc.hi), v(dw.med), v(dw.lo), v(dw.hi))
	}
	pick := func(rs []boundaryRun, f func(boundaryRun) float64) []float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return v
	}
	row("open to first byte of a new epoch (= one buffer's load)", "ms", 1e3, res.firstCold, res.firstWarm)
	row("epoch e: time to its first read", "ms", 1e3, pick(res.cold, func(r boundaryRun) float64 { return r.first }), pick(res.warm, func(r boundaryRun) float64 { return r.first }))
	row("epoch e: whole epoch", "s", 1, pick(res.cold, func(r boundaryRun) float64 { return r.epoch }), pick(res.warm, func(r boundaryRun) float64 { return r.epoch }))
	row("epoch e after the first read: daemon stall / time", "%", 100, pick(res.cold, func(r boundaryRun) float64 { return r.stallAfterFirst / r.after() }),
		pick(res.warm, func(r boundaryRun) float64 { return r.stallAfterFirst / r.after() }))
	row(fmt.Sprintf("epoch e after the first read: reader time in reads > %s / time", slowRead), "%", 100,
		pick(res.cold, func(r boundaryRun) float64 { return r.slowAfterFirst / r.after() }),
		pick(res.warm, func(r boundaryRun) float64 { return r.slowAfterFirst / r.after() }))
	row("epoch boundary: open + first 1 MiB read of e+1", "ms", 1e3, pick(res.cold, func(r boundaryRun) float64 { return r.boundary }), pick(res.warm, func(r boundaryRun) float64 { return r.boundary }))
	p("\nThe daemon peaked at %s resident (--max-memory %s, loader peak %s).\n\n", fmtBytes(res.usage.rss),
		fmtBytes(res.usage.config.MaxMemory), fmtBytes(res.usage.stats.MemoryPeak))
	bc := summarize(pick(res.cold, func(r boundaryRun) float64 { return r.boundary }))
	fc := summarize(res.firstCold)
	wc := summarize(pick(res.cold, func(r boundaryRun) float64 { return r.stallAfterFirst / r.after() }))
	p("#### Observations\n\n")
	p("Cold, a new epoch's first byte came after %.0f ms (one buffer's load); at the boundary from an epoch\n", 1e3*fc.med)
	p("just read the first MiB of the next came after %.1f ms, since its first buffer was prefetched\n", 1e3*bc.med)
	p("during the last buffer of the previous epoch. After its first buffer the reader waited %.2f%% of\n", 100*wc.med)
	p("the epoch's time (daemon stall, cold).\n")
	return b.String()
}
