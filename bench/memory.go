//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/corgifs/corgifs/api"
)

const memoryHeading = "## Memory: peak RSS against --max-memory, and read amplification (issue 12)"

// The memory section's parameters: README promises a peak RSS within
// --max-memory + rssAllowance whatever the number of readers.
var (
	memReaders     = []int{1, 16, 64, 256}
	memBudgets     = []int64{16 << 20, 64 << 20}
	ampReaders     = []int{1, 8}
	ampBudget      = int64(64 << 20)
	rssAllowance   = int64(64 << 20)
	memStrategy    = "corgipile"
	memReadBufSize = 1 << 20
)

// memRun is one mount read by some readers at once.
type memRun struct {
	readers int
	budget  int64
	buffer  string // --buffer, or "" for the default
	secs    float64
	bytes   int64 // read by the readers
	rss     int64 // the daemon's VmHWM over the reads
	stats   api.Stats
	// hwmReset says that the peak of the indexing was cleared before the
	// reads (root only); otherwise rss includes it.
	hwmReset  bool
	bufferLen int64 // the buffer of one part, from config.json
}

func (r memRun) amplification() float64 {
	if r.stats.BytesServed == 0 {
		return 0
	}
	return float64(r.stats.BytesRead) / float64(r.stats.BytesServed)
}

type memResults struct {
	rss, amp []memRun
	load     [2]string
}

// runMemory mounts the dataset once per reader count and budget, has that
// many readers (goroutines of the benchmark, 1 MiB reads) read the parts
// of epoch 0 of K = readers at once, each its own part to its end, and
// reads the daemon's peak RSS; then, for the amplification, mounts it with
// --buffer 100% under a short budget and compares the bytes the daemon
// read from the source with the bytes it served.
func (e *runEnv) runMemory(ctx context.Context) error {
	res := &memResults{}
	res.load[0] = loadAverage()
	for _, budget := range memBudgets {
		for _, n := range memReaders {
			r, err := e.memoryRun(ctx, n, budget, "")
			if err != nil {
				return err
			}
			res.rss = append(res.rss, r)
		}
	}
	for _, n := range ampReaders {
		r, err := e.memoryRun(ctx, n, ampBudget, "100%")
		if err != nil {
			return err
		}
		res.amp = append(res.amp, r)
	}
	res.load[1] = loadAverage()
	e.mem = res
	return nil
}

// memoryRun is one mount of runMemory.
func (e *runEnv) memoryRun(ctx context.Context, readers int, budget int64, buffer string) (memRun, error) {
	r := memRun{readers: readers, budget: budget, buffer: buffer}
	name := fmt.Sprintf("memory-%d-readers-%s", readers, formatSize(budget))
	args := []string{"--strategy", memStrategy, "--parts", fmt.Sprint(readers), "--max-memory", formatSize(budget)}
	if buffer != "" {
		name += "-buffer-" + strings.TrimSuffix(buffer, "%")
		args = append(args, "--buffer", buffer)
	}
	d, err := e.mountCorgifs(ctx, name, "", args...)
	if err != nil {
		return r, err
	}
	defer d.kill()
	// The peak so far is the indexing's (the first mount builds the
	// index); writing 5 to clear_refs resets VmHWM to the current RSS.
	r.hwmReset = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", d.pid()), []byte("5"), 0) == nil
	var wg sync.WaitGroup
	sizes := make([]int64, readers)
	errs := make([]error, readers)
	start := time.Now()
	for i := range readers {
		wg.Go(func() {
			sizes[i], errs[i] = readAll(ctx, []string{partPath(d.mnt, 0, i, readers)}, make([]byte, memReadBufSize))
		})
	}
	wg.Wait()
	r.secs = time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("%d readers: %w", readers, err)
	}
	for _, n := range sizes {
		r.bytes += n
	}
	if err := readJSON(api.StatsPath(d.mnt), &r.stats); err != nil {
		return r, err
	}
	var cfg api.Config
	if err := readJSON(api.ConfigPath(d.mnt), &cfg); err != nil {
		return r, err
	}
	r.bufferLen = cfg.BufferPart
	if r.rss, err = peakRSS(d.pid()); err != nil {
		return r, err
	}
	if err := d.stop(); err != nil {
		return r, err
	}
	e.logf("memory: %d readers, %s: %s in %.2fs, peak RSS %s, source/served %.2f",
		readers, strings.Join(args[2:], " "), fmtBytes(r.bytes), r.secs, fmtBytes(r.rss), r.amplification())
	return r, nil
}

// signedBytes formats n, which may be negative, in binary units.
func signedBytes(n int64) string {
	if n < 0 {
		return "−" + fmtBytes(-n)
	}
	return fmtBytes(n)
}

func (h *harness) memoryMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", memoryHeading)
	p("**Peak RSS**: one corgifs mount (`--strategy %s`, default buffer) per --max-memory and\n", memStrategy)
	p("reader count N, with `--parts N`; N readers (goroutines of the benchmark, not the daemon) read\n")
	p("the N parts of epoch 0 at once, each its own part to its end in 1 MiB reads. The daemon's peak\n")
	p("RSS (VmHWM, reset after the mount so that the indexing of the first mount is not counted) is\n")
	p("set against README's promise, --max-memory + %s. **Read amplification**: the same with\n", fmtBytes(rssAllowance))
	p("`--buffer 100%%` and `--max-memory %s`, for 1 and 8 readers: the bytes the daemon read from\n", fmtBytes(ampBudget))
	p("the source (`bytes_read` of stats.json) per byte it served (`bytes_served`).\n\n")
	p("%s", h.sectionRest(took, sectionCommand(h.o, "--memory"), (*runEnv).memoryBody))
	return b.String()
}

// memoryBody is the part of the memory section about one dataset.
func (e *runEnv) memoryBody() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	res := e.mem
	p("#### Setup\n\n%s", datasetLine(e.ds))
	p("%s\n", loadLine(res.load))
	p("#### Peak RSS\n\n")
	p("| --max-memory | readers | buffer per part | read | time | peak RSS | peak − budget | within budget + %s | loader peak | source/served |\n", fmtBytes(rssAllowance))
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: |\n")
	within := true
	reset := true
	for _, r := range res.rss {
		ok := "yes"
		if r.rss > r.budget+rssAllowance {
			ok, within = "**no**", false
		}
		reset = reset && r.hwmReset
		p("| %s | %d | %s | %s | %.2f s | %s | %s | %s | %s | %.2f |\n", fmtBytes(r.budget), r.readers, fmtBytes(r.bufferLen),
			fmtBytes(r.bytes), r.secs, fmtBytes(r.rss), signedBytes(r.rss-r.budget), ok, fmtBytes(r.stats.MemoryPeak), r.amplification())
	}
	if !reset {
		p("\nThe peak RSS could not be reset after the mount (not root): it includes the indexing.\n")
	}
	p("\n#### Read amplification\n\n")
	p("| readers | --max-memory | buffer per part | read | time | source bytes read | bytes served | source/served | evictions | memory waits |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range res.amp {
		p("| %d | %s | %s | %s | %.2f s | %d | %d | **%.2f** | %d | %d |\n", r.readers, fmtBytes(r.budget), fmtBytes(r.bufferLen),
			fmtBytes(r.bytes), r.secs, r.stats.BytesRead, r.stats.BytesServed, r.amplification(), r.stats.Evictions, r.stats.MemoryWaits)
	}
	p("\n#### Observations\n\n")
	worst := res.rss[0]
	for _, r := range res.rss {
		if r.rss-r.budget > worst.rss-worst.budget {
			worst = r
		}
	}
	if within {
		p("Every run stayed within --max-memory + %s; the most above its budget was %d readers at\n", fmtBytes(rssAllowance), worst.readers)
		p("--max-memory %s: %s (%s over).", fmtBytes(worst.budget), fmtBytes(worst.rss), signedBytes(worst.rss-worst.budget))
	} else {
		p("**Not every run stayed within --max-memory + %s**: the most above its budget was %d readers at\n", fmtBytes(rssAllowance), worst.readers)
		p("--max-memory %s: %s (%s over).", fmtBytes(worst.budget), fmtBytes(worst.rss), signedBytes(worst.rss-worst.budget))
	}
	if len(res.amp) > 1 {
		first, last := res.amp[0], res.amp[len(res.amp)-1]
		p("\nWith --buffer 100%% under --max-memory %s, %d reader(s) read %.2f source bytes per byte\n", fmtBytes(ampBudget), first.readers, first.amplification())
		p("served, %d readers %.2f.", last.readers, last.amplification())
	}
	p("\n")
	return b.String()
}
