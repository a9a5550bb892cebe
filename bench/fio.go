//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const fioHeading = "## fio on a part file (issue 4)"

// fioJobs are the job files in bench/fio, in table order.
var fioJobs = []string{"seq-read-1m", "rand-read-4k", "rand-read-1m"}

// fioRun is one fio run's read statistics.
type fioRun struct {
	mbps, iops, latMeanUs, lat99Us float64
	ioBytes                        int64
	amplification                  float64 // corgifs: bytes read from SRC over bytes served
}

type fioResults struct {
	runs    map[string]map[string][]fioRun // job -> target -> runs
	usage   daemonUsage
	version string // fio --version
	load    [2]string
}

// runFio runs each job of bench/fio against a corgipile part (K=1, a fresh
// epoch each run) and against the source files, with the source in the
// page cache.
func (e *runEnv) runFio(ctx context.Context) error {
	if _, err := exec.LookPath("fio"); err != nil {
		return fmt.Errorf("fio is not installed (Debian: apt-get install fio): %w", err)
	}
	version := "?"
	if out, err := exec.CommandContext(ctx, "fio", "--version").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	d, err := e.mountCorgifs(ctx, "fio-corgipile", "", "--strategy", "corgipile")
	if err != nil {
		return err
	}
	defer d.kill()
	// The source in the page cache.
	if _, err := timeCmd(ctx, nil, append([]string{"cat"}, e.ds.paths()...)...); err != nil {
		return err
	}
	res := &fioResults{runs: map[string]map[string][]fioRun{}, version: version}
	targets := []string{"part", "source"}
	cpu0, err := cpuSeconds(d.pid())
	if err != nil {
		return err
	}
	var served int64
	res.load[0] = loadAverage()
	for r := 1; r <= e.o.runs; r++ {
		for j, job := range fioJobs {
			if res.runs[job] == nil {
				res.runs[job] = map[string][]fioRun{}
			}
			for i := range targets {
				target := targets[(i+r+j)%len(targets)]
				files := strings.Join(e.ds.paths(), ":")
				part := partPath(d.mnt, 100+10*r+j, 0, 1)
				if target == "part" {
					files = part
				}
				st0, err := corgifsStats(d.mnt)
				if err != nil {
					return err
				}
				fr, err := e.fioJob(ctx, job, files)
				if err != nil {
					return fmt.Errorf("on %s: %w", target, err)
				}
				if target == "part" {
					st1, err := corgifsStats(d.mnt)
					if err != nil {
						return err
					}
					fr.amplification = float64(st1.BytesRead-st0.BytesRead) / float64(fr.ioBytes)
					served += fr.ioBytes
					dropPages([]string{part})
				}
				res.runs[job][target] = append(res.runs[job][target], fr)
				e.logf("fio run %d/%d  %-14s %-7s %8.0f MB/s %9.0f IOPS", r, e.o.runs, job, target, fr.mbps, fr.iops)
			}
		}
	}
	res.load[1] = loadAverage()
	u, err := stopMeasured(d, cpu0)
	if err != nil {
		return err
	}
	u.served = served
	res.usage = u
	e.fio = res
	return nil
}

// fioJob runs the job file bench/fio/JOB.fio on files (separated by ':')
// for --fio-runtime and returns its read statistics.
func (e *runEnv) fioJob(ctx context.Context, job, files string) (fioRun, error) {
	outFile := filepath.Join(e.work, "fio.json")
	cmd := exec.CommandContext(ctx, "fio", "--output-format=json", "--output="+outFile, filepath.Join(e.root, "bench", "fio", job+".fio"))
	cmd.Env = append(os.Environ(), "FIO_FILE="+files, fmt.Sprintf("FIO_RUNTIME=%d", int(e.o.fioRuntime.Seconds())))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fioRun{}, fmt.Errorf("fio %s: %w\n%s", job, err, out)
	}
	return parseFio(outFile)
}

func parseFio(path string) (fioRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fioRun{}, err
	}
	// fio may print notes before the JSON.
	if i := strings.IndexByte(string(b), '{'); i > 0 {
		b = b[i:]
	}
	var v struct {
		Jobs []struct {
			Read struct {
				IOBytes int64   `json:"io_bytes"`
				BW      int64   `json:"bw_bytes"`
				IOPS    float64 `json:"iops"`
				Lat     struct {
					Mean float64 `json:"mean"`
				} `json:"lat_ns"`
				Clat struct {
					Percentile map[string]float64 `json:"percentile"`
				} `json:"clat_ns"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Jobs) != 1 {
		return fioRun{}, fmt.Errorf("%s: not fio JSON output with one job: %v", path, err)
	}
	r := v.Jobs[0].Read
	return fioRun{mbps: float64(r.BW) / 1e6, iops: r.IOPS, latMeanUs: r.Lat.Mean / 1e3,
		lat99Us: r.Clat.Percentile["99.000000"] / 1e3, ioBytes: r.IOBytes}, nil
}

func (h *harness) fioMarkdown(took time.Duration) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", fioHeading)
	p("The job files in `bench/fio/` (psync, one thread, direct=0: through the page cache), run by\n")
	p("fio against part 0 of 1 of a fresh corgipile epoch of a corgifs mount (its cached pages\n")
	p("dropped after each run) and against the %d source files, which are in the page cache\n", dataFiles)
	p("(**warm**). The random jobs are time-based, %s each; the sequential job makes one pass\n", h.o.fioRuntime)
	p("(stopped at %s). For each dataset in turn targets and jobs alternate, %d runs each.\n\n", h.o.fioRuntime, h.o.runs)
	command := sectionCommand(h.o, "--fio") + " --fio-runtime " + h.o.fioRuntime.String()
	p("%s", h.sectionRest(took, command, (*runEnv).fioBody, "fio: "+h.sets[0].fio.version))
	return b.String()
}

// fioBody is the part of the fio section about one dataset.
func (e *runEnv) fioBody() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	res, u := e.fio, e.fio.usage
	p("#### Setup\n\n%s", datasetLine(e.ds))
	p("- corgifs: `corgifs mount SRC MNT --strategy corgipile --seed 1` (K=1, block 8 MiB, buffer 5%%\n")
	p("  = %s, --max-memory 1 GiB); a part holds the whole epoch, %.2f GB.\n", humanizeBuffer(u), float64(e.ds.Bytes)/1e9)
	p("%s\n", loadLine(res.load))
	p("#### Results\n\n")
	p("| job | target | median MB/s | min–max MB/s | median IOPS | × source | mean latency µs | p99 latency µs | read from SRC / served |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, job := range fioJobs {
		src := res.runs[job]["source"]
		var srcMB []float64
		for _, r := range src {
			srcMB = append(srcMB, r.mbps)
		}
		sm := summarize(srcMB).med
		for _, target := range []string{"part", "source"} {
			var mb, iops, lat, p99, amp []float64
			for _, r := range res.runs[job][target] {
				mb, iops, lat, p99, amp = append(mb, r.mbps), append(iops, r.iops), append(lat, r.latMeanUs), append(p99, r.lat99Us), append(amp, r.amplification)
			}
			d := summarize(mb)
			name := "corgifs part"
			a := fmt.Sprintf("%.1f", summarize(amp).med)
			if target == "source" {
				name, a = "source files", "–"
			}
			p("| %s | %s | %.0f | %.0f–%.0f | %.0f | %.2f | %.0f | %.0f | %s |\n", job, name, d.med, d.lo, d.hi,
				summarize(iops).med, d.med/sm, summarize(lat).med, summarize(p99).med, a)
		}
	}
	p("\nThe corgifs daemon used %.2f CPU seconds per GiB served and peaked at %s resident.\n\n", u.cpuPerGiB(), fmtBytes(u.rss))
	p("#### Observations\n\n")
	p("A corgifs part is a stream: a sequential reader gets the disk's (here the page cache's) speed less the\n")
	p("FUSE cost, but a random read lands in a buffer that is usually not loaded, and the daemon\n")
	p("loads the whole buffer (%s) to serve it; \"read from SRC / served\" is that amplification.\n", humanizeBuffer(u))
	p("Random access to a part is correct but not what it is for.\n")
	return b.String()
}
