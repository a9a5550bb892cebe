package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/fs"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/source/s3"
	"github.com/dustin/go-humanize"
)

// mountFlags are the flags of corgifs mount: its options (mount.Options)
// in d, and how the process runs.
type mountFlags struct {
	d          datasetFlags
	nonempty   *bool
	cpuprofile *string
	sys        sysFlags
}

// newMountFlagSet returns the flag set of corgifs mount, which the mount
// helper also checks its -o options against.
func newMountFlagSet(stderr io.Writer) (*flag.FlagSet, *mountFlags) {
	m := new(mountFlags)
	fset := newFlagSet("mount", "SRC MNT", `Mounts SRC, a directory of record files (TFRecord, CSV, JSONL, LIBSVM, text
lines, WebDataset tar, .npy or fixed-size records; see --format) or s3://BUCKET/PREFIX,
read-only at MNT and serves it in the foreground until SIGINT, SIGTERM or SIGHUP
(--background: in a daemon, returning once the mount serves).
MNT/epoch-NNNN/part-IIIII-of-KKKKK.EXT holds part I of K of epoch N, a file of
the source's format with its extension (.tfrecord, .csv, .tar, .npy, ...): the K
parts of an epoch hold every record once (mrs: once in the epoch it scans it or
the next).`, stderr)
	m.d.register(fset, mount.CmdMount)
	m.nonempty = fset.Bool("nonempty", false, "allow mounting over a non-empty directory (its files are hidden while mounted)")
	m.cpuprofile = fset.String("cpuprofile", "", "write a CPU profile to `file` until unmount")
	m.sys.register(fset)
	return fset, m
}

func serveMount(args []string, stdout, stderr io.Writer, rd *readiness) error {
	fset, m := newMountFlagSet(stderr)
	d, sys := &m.d, &m.sys
	pos, err := d.parse(fset, args, 2)
	if err != nil {
		return err
	}
	src, mnt := pos[0], pos[1]
	// Every option is checked before anything is read, and before a
	// --background daemon starts.
	// Test hook: the end-to-end tests make a lookup panic on purpose.
	d.c.PanicOnLookup = os.Getenv("CORGIFS_TEST_PANIC_LOOKUP")
	c, err := d.mountConfig(src)
	if err != nil {
		return err
	}
	if err := checkMountpoint(src, mnt, *m.nonempty); err != nil {
		return err
	}
	if err := c.CheckDiskCache(mnt); err != nil {
		return flagError(err)
	}
	if bg, err := sys.start(rd, args, c.CacheDir, mnt, stdout, &stderr); bg || err != nil {
		return err
	}
	// A reader of stderr that goes away (`corgifs mount … 2>&1 | head`, a
	// dead tee) must not kill the daemon and leave a dead mount: with SIGPIPE
	// ignored a failed log write is an error that slog drops.
	signal.Ignore(syscall.SIGPIPE)
	log := newLogger(stderr, d.debug)
	raiseOpenFileLimit(log)
	ctx, again, stop := notifyShutdown()
	defer stop()
	indexed := make(chan struct{})
	go exitIfStuck(ctx, again, indexed, log)

	c.Progress = progressFunc(stderr, "indexing")
	ds, err := d.openConfig(ctx, c, log)
	close(indexed)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s while indexing %s: nothing mounted: %w", signalOf(ctx), src, err)
		}
		return err
	}
	defer ds.Close()
	ix, pl := ds.Index, ds.Planner
	c = ds.Config
	d.warnParts(ix, pl, c.Parts, log)
	if *m.cpuprofile != "" {
		f, err := os.Create(*m.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	srv, err := ds.Serve(context.Background(), mnt)
	if err != nil {
		return flagError(err)
	}
	log.Info("mounted", "mountpoint", mnt, "strategy", c.Strategy, "seed", c.Seed, "parts", c.Parts,
		"buffer", c.Buffer.String(), "block_size", humanize.IBytes(uint64(c.BlockSize)),
		"max_memory", humanize.IBytes(uint64(c.MaxMemory)))
	rd.ready(stdout, stderr, mnt, fmt.Sprintf("corgifs: mounted %s at %s (%s, %d parts, seed %d)", src, mnt, recordsPhrase(ix), c.Parts, c.Seed))
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		log.Info("unmounted from outside", "mountpoint", mnt)
		return nil
	case <-ctx.Done():
	}
	rd.stopping()
	pl.Close() // an open waiting for feedback gives up now, not at --feedback-timeout
	log.Info("signal received, unmounting", "signal", signalOf(ctx), "mountpoint", mnt)
	return shutdown(srv, mnt, done, again, log)
}

// checkParts refuses a K whose part names would not resolve.
func checkParts(parts int) error {
	if parts < 1 || parts > fs.MaxParts {
		return fmt.Errorf("--parts %d: want 1 to %d (%d parts at most: larger part names do not resolve)", parts, fs.MaxParts, fs.MaxParts)
	}
	return nil
}

// checkMountpoint refuses mount points that would surprise: inside the
// source, not a directory, not empty, or a dead FUSE mount.
func checkMountpoint(src, mnt string, nonempty bool) error {
	absSrc := ""
	if !s3.IsURL(src) {
		var err error
		if absSrc, err = realPath(src); err != nil {
			return err
		}
	}
	absMnt, err := realPath(mnt)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(absSrc, absMnt); err == nil && absSrc != "" && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return fmt.Errorf("mount point %s is inside the source %s; choose a mount point outside it", mnt, src)
	}
	// A dead mount can still answer stat from the kernel's attribute cache:
	// listing it is what fails.
	check := func(err error) error {
		if errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("%s is a dead FUSE mount (its daemon was killed): run 'corgifs unmount %s' first", mnt, mnt)
		}
		return fmt.Errorf("mount point: %w", err)
	}
	if err := refuseLiveMount(mnt); err != nil {
		return err
	}
	fi, err := os.Stat(mnt)
	if err != nil {
		return check(err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("mount point %s is not a directory", mnt)
	}
	f, err := os.Open(mnt)
	if err != nil {
		return check(err)
	}
	names, err := f.Readdirnames(1)
	f.Close()
	if err != nil && err != io.EOF {
		return check(err)
	}
	if len(names) > 0 && !nonempty {
		return fmt.Errorf("mount point %s is not empty (pass --nonempty to mount over it anyway)", mnt)
	}
	return nil
}

func realPath(p string) (string, error) { return mount.RealPath(p) }

func runUnmount(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("unmount", "MNT", `Unmounts a corgifs mount lazily: also one that is busy or whose daemon was
killed. Any other mount at MNT is refused unless --force.`, stderr)
	force := fset.Bool("force", false, "detach the mount at MNT even if it is not a corgifs mount")
	pos, err := parse(fset, args, 1)
	if err != nil {
		return err
	}
	mnt := pos[0]
	typ, err := fs.MountType(mnt)
	if err != nil {
		return notMountedError(mnt, err)
	}
	if typ != fs.MountTypeName && !*force {
		return fmt.Errorf("%s is a %s mount, not a corgifs one (%s); pass --force to detach it anyway", mnt, typ, fs.MountTypeName)
	}
	return fs.LazyUnmount(mnt)
}

func runIndex(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("index", "SRC", "Builds (or, if a source file changed, rebuilds) the index of SRC in --cache-dir and prints a summary.", stderr)
	var d datasetFlags
	d.register(fset, mount.CmdIndex)
	pos, err := d.parse(fset, args, 1)
	if err != nil {
		return err
	}
	if err := d.checkCacheDir(); err != nil {
		return err
	}
	if err := d.checkFormat(); err != nil {
		return err
	}
	log := newLogger(stderr, d.debug)
	raiseOpenFileLimit(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The sizes a mount of one part would choose, so that it finds this
	// index in the cache.
	c := d.config(pos[0])
	c.Progress = progressFunc(stderr, "indexing")
	mount.LimitIndexHeap(c.MaxMemory)
	ds, err := mount.OpenIndex(ctx, c, log)
	if err != nil {
		return flagError(err)
	}
	ix, cached := ds.Index, ds.Cached
	sizes := fmt.Sprintf("min %d, median %d, max %d bytes", ix.RecordMin, ix.RecordMedian, ix.RecordMax)
	if ix.Probed {
		sizes = "not known (probed index)"
	}
	fmt.Fprintf(stdout, "source      %s\nindex       %s\nformat      %s\nfiles       %d\nrecords     %s\nbytes       %s (%d)\nblocks      %d of about %s\nrecord size %s\nskipped     %d damaged ranges\nfrom cache  %v\n",
		ix.Root, api.IndexMode(ix), ix.Format, len(ix.Files), mount.RecordsText(ix), humanize.IBytes(uint64(ix.Bytes)), ix.Bytes, len(ix.Blocks),
		humanize.IBytes(uint64(ix.BlockSize)), sizes, len(ix.Damaged), cached)
	if c := ix.Compressed(); c.Files > 0 {
		fmt.Fprintf(stdout, "compressed  %d files, %s stored; %d access points, %s (%.2f%% of the compressed bytes)\n",
			c.Files, humanize.IBytes(uint64(c.Stored)), c.Points, humanize.IBytes(uint64(c.PointBytes)), 100*float64(c.PointBytes)/float64(max(1, c.Stored)))
	}
	if ds.Source != nil {
		// What indexing cost the object store: what it bills, and what
		// a probe index is meant to keep to a few percent of the bytes.
		st := ds.Source.Stats()
		fmt.Fprintf(stdout, "requests    %d, of which %d ranged GETs of %s (%d bytes)\n", st.Requests, st.GETs, humanize.IBytes(uint64(st.GETBytes)), st.GETBytes)
	}
	return nil
}
