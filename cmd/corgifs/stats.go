package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/blockcache"
	"github.com/dustin/go-humanize"
	"golang.org/x/term"
)

// sourceCounters are the requests of an object store in stats.json's
// "source" (absent for a local source; api.Stats keeps it as the source's
// own type).
type sourceCounters struct {
	Requests int64 `json:"requests"`
	GETs     int64 `json:"gets"`
	GETBytes int64 `json:"get_bytes"`
}

// perGiB is n requests for bytes, per GiB of them.
func perGiB(n, bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return float64(n) / (float64(bytes) / (1 << 30))
}

// statsEpochRows is how many epochs the terminal view lists, the latest:
// a mount serves hundreds, and the screen would scroll.
const statsEpochRows = 8

type statsSample struct {
	at  time.Time
	c   api.Stats // what stats computes with; raw passes every field through
	src *sourceCounters
	raw map[string]json.RawMessage
}

// statsLine is one interval, as printed on a pipe.
type statsLine struct {
	Time     time.Time `json:"time"`
	Interval float64   `json:"interval_s"`
	// Throughput over the interval: to readers, and from the source.
	ServedMBps float64 `json:"served_mb_s"`
	SourceMBps float64 `json:"source_mb_s"`
	// Read from the --disk-cache, when the mount has one.
	DiskCacheMBps float64 `json:"disk_cache_mb_s,omitempty"`
	// Since the mount started: buffers a reader found loaded (by
	// prefetch or still cached) among all it asked for, and prefetched
	// buffers that were used.
	HitRate         float64 `json:"hit_rate"`
	PrefetchUseRate float64 `json:"prefetch_use_rate"`
	StallsPerSecond float64 `json:"stalls_per_s"`
	// GETs of an object store over the interval, and since the mount
	// started per GiB they brought: what the reads cost in requests.
	SourceGETsPerSecond float64 `json:"source_gets_s,omitempty"`
	SourceGETsPerGiB    float64 `json:"source_gets_per_gib,omitempty"`
	// The counters of stats.json at the end of the interval, all of them.
	Counters map[string]json.RawMessage `json:"counters"`
}

func runStats(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("stats", "MNT", `Shows the live counters of the corgifs mount at MNT (MNT/.corgifs/stats.json):
throughput to readers and from the source over each interval, the share of
buffers readers found already loaded, stalls, memory. On a terminal the
screen is redrawn every --interval; on a pipe one JSON object is printed per
interval, a line each, with every counter of stats.json under "counters".`, stderr)
	interval := fset.Duration("interval", time.Second, "time between samples")
	count := fset.Int("count", 0, "stop after `N` intervals (0: until interrupted)")
	pos, err := parse(fset, args, 1)
	if err != nil {
		return err
	}
	if *interval <= 0 || *count < 0 {
		return fmt.Errorf("--interval must be positive and --count >= 0")
	}
	path := api.StatsPath(pos[0])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, isFile := stdout.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))

	prev, err := readStats(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for n := 0; *count == 0 || n < *count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := readStats(path)
		if err != nil {
			return err
		}
		line := between(prev, cur)
		if tty {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J")
			drawStats(stdout, pos[0], line, cur)
		} else if err := enc.Encode(line); err != nil {
			return err
		}
		prev = cur
	}
	return nil
}

// readStats reads stats.json once. A stats.json that is not there says
// that MNT is not a corgifs mount.
func readStats(path string) (statsSample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		mnt := filepath.Dir(filepath.Dir(path))
		return statsSample{}, fmt.Errorf("%s is not a live corgifs mount (%w)", mnt, err)
	}
	s, err := parseStats(b)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// parseStats decodes the bytes of a stats.json taken now.
func parseStats(b []byte) (statsSample, error) {
	s := statsSample{at: time.Now()}
	if err := json.Unmarshal(b, &s.c); err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s.raw); err != nil {
		return s, err
	}
	if raw, ok := s.raw["source"]; ok {
		s.src = new(sourceCounters)
		if err := json.Unmarshal(raw, s.src); err != nil {
			return s, fmt.Errorf("source: %w", err)
		}
	}
	return s, nil
}

func between(a, b statsSample) statsLine {
	dt := b.at.Sub(a.at).Seconds()
	l := statsLine{Time: b.at.UTC().Round(time.Millisecond), Interval: dt, Counters: b.raw}
	if dt > 0 {
		l.ServedMBps = float64(b.c.BytesServed-a.c.BytesServed) / dt / 1e6
		l.SourceMBps = float64(b.c.BytesRead-a.c.BytesRead) / dt / 1e6
		l.StallsPerSecond = float64(b.c.Stalls-a.c.Stalls) / dt
		if a.src != nil && b.src != nil {
			l.SourceGETsPerSecond = float64(b.src.GETs-a.src.GETs) / dt
		}
		if a.c.DiskCache != nil && b.c.DiskCache != nil {
			l.DiskCacheMBps = float64(b.c.DiskCache.HitBytes-a.c.DiskCache.HitBytes) / dt / 1e6
		}
	}
	if src := b.src; src != nil {
		l.SourceGETsPerGiB = perGiB(src.GETs, src.GETBytes)
	}
	// Buffers loaded on demand are those not loaded by a prefetch.
	hits := b.c.PrefetchHits + b.c.CacheHits
	misses := max(0, b.c.BuffersLoaded-b.c.PrefetchIssued)
	if hits+misses > 0 {
		l.HitRate = float64(hits) / float64(hits+misses)
	}
	if b.c.PrefetchIssued > 0 {
		l.PrefetchUseRate = float64(b.c.PrefetchHits) / float64(b.c.PrefetchIssued)
	}
	return l
}

func drawStats(w io.Writer, mnt string, l statsLine, s statsSample) {
	c := s.c
	mb := func(v int64) string { return humanize.IBytes(uint64(max(0, v))) }
	fmt.Fprintf(w, "corgifs stats %s   %s (every %.1fs, Ctrl-C to stop)\n\n", mnt, l.Time.Local().Format("15:04:05"), l.Interval)
	row := func(label string, v float64, unit, rest string) {
		fmt.Fprintf(w, "  %-21s %8.1f %-6s %s\n", label, v, unit, rest)
	}
	row("served to readers", l.ServedMBps, "MB/s", mb(c.BytesServed)+" in all")
	row("read from source", l.SourceMBps, "MB/s", mb(c.BytesRead)+" in all")
	if src := s.src; src != nil {
		row("GETs to the store", l.SourceGETsPerSecond, "/s", fmt.Sprintf("%d in all for %s: %.0f GETs per GiB; %d requests of every kind",
			src.GETs, mb(src.GETBytes), l.SourceGETsPerGiB, src.Requests))
	}
	if d := c.DiskCache; d != nil {
		rest := fmt.Sprintf("%s in all; holds %s of %s", mb(d.HitBytes), mb(d.BytesHeld), mb(d.MaxBytes))
		if d.Disabled != "" {
			rest += "; not caching: " + d.Disabled
		}
		row("read from disk cache", l.DiskCacheMBps, "MB/s", rest)
	}
	row("buffers found loaded", 100*l.HitRate, "%", fmt.Sprintf("prefetched buffers used: %.1f %%", 100*l.PrefetchUseRate))
	row("stalls", l.StallsPerSecond, "/s", fmt.Sprintf("%d in all, %.1f s waited; %d waits for memory", c.Stalls, c.StallSeconds, c.MemoryWaits))
	fmt.Fprintf(w, "  %-21s %s in use, %s peak, %s budget\n", "memory", mb(c.MemoryInUse), mb(c.MemoryPeak), mb(c.MemoryBudget))
	if c.LoadErrors > 0 {
		fmt.Fprintf(w, "  %-21s %d (see the daemon's log)\n", "load errors", c.LoadErrors)
	}
	drawEpochs(w, c.Epochs)
	// Other per-epoch counters, which this version does not know, are
	// shown as they are.
	var keys []string
	for k := range s.raw {
		if strings.Contains(k, "epoch") && k != "epochs" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-21s %s\n", k, s.raw[k])
	}
}

// drawEpochs writes the bytes loaded per epoch as a table, the latest
// statsEpochRows epochs, with the share each epoch found in memory or the
// disk cache rather than at the source.
func drawEpochs(w io.Writer, epochs map[int]blockcache.EpochStats) {
	if len(epochs) == 0 {
		return
	}
	es := slices.Sorted(maps.Keys(epochs))
	// The GETs of an object store, per GiB of the bytes they brought.
	gets := slices.ContainsFunc(es, func(e int) bool { return epochs[e].SourceGETs > 0 })
	getsHead := ""
	if gets {
		getsHead = fmt.Sprintf(" %10s %9s", "GETs", "GETs/GiB")
	}
	fmt.Fprintf(w, "\n  %-7s %12s %12s %12s %10s%s\n", "epoch", "source", "disk cache", "memory", "not source", getsHead)
	if len(es) > statsEpochRows {
		fmt.Fprintf(w, "  (%d earlier epochs not shown)\n", len(es)-statsEpochRows)
		es = es[len(es)-statsEpochRows:]
	}
	mb := func(v int64) string { return humanize.IBytes(uint64(max(0, v))) }
	for _, e := range es {
		c := epochs[e]
		share := "-"
		if all := c.SourceBytes + c.DiskCacheBytes + c.MemoryBytes; all > 0 {
			share = fmt.Sprintf("%.1f %%", 100*float64(all-c.SourceBytes)/float64(all))
		}
		getsCols := ""
		if gets {
			getsCols = fmt.Sprintf(" %10d %9.0f", c.SourceGETs, perGiB(c.SourceGETs, c.SourceBytes))
		}
		fmt.Fprintf(w, "  %-7d %12s %12s %12s %10s%s\n", e, mb(c.SourceBytes), mb(c.DiskCacheBytes), mb(c.MemoryBytes), share, getsCols)
	}
}
