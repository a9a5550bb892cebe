//go:build linux

package main

import (
	"fmt"
	"strings"
)

const targetsHeading = "## Issue 4 targets"

// perRecordMax is the largest record size the per-record pread target is
// checked on: issue 4 states it for 1 KiB records, and larger records make
// a pread per record cheaper per byte, so on them the row is information.
const perRecordMax = 1 << 10

// targetRow is one row of the targets table.
type targetRow struct {
	target, dataset, measured, met, where string
}

// targetsMarkdown checks the targets of issue 4 against what this run
// measured on each dataset; targets whose section did not run are left out.
func (h *harness) targetsMarkdown() string {
	var rows []targetRow
	for _, e := range h.sets {
		rows = append(rows, e.targetRows()...)
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", targetsHeading)
	p("The targets of issue 4, checked by `go run ./bench --all` against the numbers of the sections\n")
	p("above from the same run (medians unless a maximum is named; the sections give the ranges),\n")
	p("on each dataset. The issue states the per-record pread target for 1 KiB records: on larger\n")
	p("records its rows are shown but are not a target. Written by the harness; what limits the\n")
	p("misses is in the next section.\n\n")
	p("| target | dataset | measured | met | section |\n| --- | --- | --- | :---: | --- |\n")
	for _, r := range rows {
		p("| %s | %s | %s | %s | %s |\n", r.target, r.dataset, r.measured, r.met, r.where)
	}
	return b.String()
}

// targetRows checks the targets on the dataset of e.
func (e *runEnv) targetRows() []targetRow {
	var rows []targetRow
	add := func(target, measured, where string, met bool) {
		m := "no"
		if met {
			m = "yes"
		}
		rows = append(rows, targetRow{target, e.ds.label(), measured, m, where})
	}
	const mib = 1 << 20
	var rss []string
	rssMet := true
	checkRSS := func(name string, u daemonUsage) {
		if u.config == nil {
			return
		}
		ok := u.rss <= u.config.MaxMemory+64*mib
		rssMet = rssMet && ok
		rss = append(rss, fmt.Sprintf("%s %s", name, fmtBytes(u.rss)))
	}

	if w := e.warm; w != nil {
		pt, _, _ := w.loopback().throughput()
		for _, c := range w.corgifs() {
			if c.strategy != "corgipile" {
				continue
			}
			cm, _, _ := c.throughput()
			add(fmt.Sprintf("warm, K=%d: corgipile ≥ 0.90 × loopback", c.parts), fmt.Sprintf("%.2f× (%.0f / %.0f MB/s)", cm/pt, cm, pt), "warm", cm >= 0.9*pt)
			for _, n := range w.corgifs() {
				if n.strategy == "none" && n.parts == c.parts {
					nm, _, _ := n.throughput()
					add(fmt.Sprintf("warm, K=%d: corgipile ≥ 0.95 × none", c.parts), fmt.Sprintf("%.2f× (%.0f / %.0f MB/s)", cm/nm, cm, nm), "warm", cm >= 0.95*nm)
				}
			}
		}
		for _, t := range w.corgifs() {
			if t.config != nil {
				checkRSS(fmt.Sprintf("warm %s K=%d", t.strategy, t.parts), daemonUsage{rss: t.rss, config: t.config})
			}
		}
	}
	if c := e.cold; c != nil {
		cp := summarize(c.get("corgipile").mbps).med
		cat := summarize(c.get("cat").mbps).med
		rr := summarize(c.get("randread").mbps).med
		full := summarize(c.get("full").mbps).med
		add("cold: corgipile ≥ 0.90 × `cat` of the source", fmt.Sprintf("%.2f× (%.0f / %.0f MB/s)", cp/cat, cp, cat), "cold", cp >= 0.9*cat)
		perRecord := func(target, measured string, met bool) {
			if e.ds.RecordSize <= perRecordMax {
				add(target, measured, "cold", met)
				return
			}
			rows = append(rows, targetRow{target, e.ds.label(), measured, "not a target", "cold"})
		}
		ceiling := ""
		if dev := c.get("device"); dev != nil {
			d := summarize(dev.mbps).med
			ceiling = fmt.Sprintf("; 10× is %.0f MB/s, %.2f× the disk's %.0f MB/s (fio)", 10*rr, 10*rr/d, d)
		}
		perRecord("cold: corgipile ≥ 10 × a pread per record (randread, 4 goroutines)", fmt.Sprintf("%.1f× (%.0f / %.0f MB/s)%s", cp/rr, cp, rr, ceiling), cp >= 10*rr)
		perRecord("cold: corgipile ≥ 10 × a pread per record (corgifs `full`)", fmt.Sprintf("%.1f× (%.0f / %.0f MB/s)", cp/full, cp, full), cp >= 10*full)
		for _, t := range c.targets {
			if t.corgifs {
				checkRSS("cold "+t.strategy, t.usage)
			}
		}
	}
	if r := e.e2e; r != nil {
		so := summarize(totals(r.copySecs, r.copyRead, 1)).med
		cg := summarize(totals(r.indexSecs, r.corgi, 1)).med
		add("end to end, cold, E=1: corgifs (indexing included) ≥ 2 × faster than Shuffle Once", fmt.Sprintf("%.2f× (%.2f / %.2f s)", so/cg, so, cg), "end to end", so >= 2*cg)
		checkRSS("end to end", r.usage)
	}
	if l := e.lat; l != nil {
		for _, m := range []struct {
			name  string
			runs  []boundaryRun
			first []float64
		}{{"cold", l.cold, l.firstCold}, {"warm", l.warm, l.firstWarm}} {
			var w, bnd []float64
			for _, r := range m.runs {
				w = append(w, r.stallAfterFirst/r.after())
				bnd = append(bnd, r.boundary)
			}
			wd, bd, fd := summarize(w), summarize(bnd), summarize(m.first)
			add(fmt.Sprintf("%s: after the first buffer a sequential reader waits < 2%% of its time", m.name),
				fmt.Sprintf("%.2f%% (max %.2f%%)", 100*wd.med, 100*wd.hi), "latency", wd.hi < 0.02)
			add(fmt.Sprintf("%s: epoch-boundary stall < one buffer's load", m.name),
				fmt.Sprintf("%.1f ms (max %.1f) against %.0f ms", 1e3*bd.med, 1e3*bd.hi, 1e3*fd.med), "latency", bd.hi < fd.med)
		}
		checkRSS("latency", l.usage)
	}
	if len(rss) > 0 {
		add("peak RSS ≤ --max-memory (1 GiB) + 64 MiB, every corgifs daemon on the dataset", strings.Join(rss, ", "), "all", rssMet)
	}

	return rows
}
