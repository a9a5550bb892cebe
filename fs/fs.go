// Package fs is the FUSE layer of corgifs and nothing more: it shows the
// epoch directories, the part files with their exact sizes, and the
// .corgifs control files, and hands every read of a part to a
// shuffler.Stream. Mount is the one entry point, used by the CLI and the
// tests alike.
package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Config says what to serve and where.
type Config struct {
	Mountpoint string
	Planner    *shuffler.Planner
	Loader     *blockcache.Loader
	Epochs     int // epoch directories listed in the root (any number resolves)
	Parts      int // parts listed in each epoch directory (any K resolves)
	// Info is served as .corgifs/config.json.
	Info       api.Config
	AllowOther bool
	Logger     *slog.Logger
	// Feedback, when set, makes the mount take feedback files (see
	// feedback.go): set it for feedback strategies only. The mount is
	// then read-write, and every other change EROFS (readOnly).
	Feedback *feedback.Store
	// FeedbackGroup, when set, lets the members of this group write
	// feedback files too; else only the mount's owner (the daemon's uid)
	// and root may (see feedback_perm.go).
	FeedbackGroup *uint32
	Debug         bool
	// PageCache has the kernel keep the parts' pages in its page cache and
	// read ahead of each reader, as before direct I/O was the default:
	// faster for readers of a few KiB at a time, slower for readers of 64
	// KiB or more (see rootNode.openFlags).
	PageCache bool

	// PanicOnLookup is a test hook, never set in normal use: when it is not
	// empty, a lookup of exactly this name in the root panics, so that the
	// end-to-end tests can check that a panicking handler is recovered. The
	// CLI sets it only from the environment variable
	// CORGIFS_TEST_PANIC_LOOKUP.
	PanicOnLookup string

	// SourceStats, if set, gives the counters of a remote source (its
	// requests, retries, refusals), served in stats.json as "source".
	SourceStats func() any
}

// Server is a mounted corgifs.
type Server struct {
	srv *fuse.Server
	mnt string
	log *slog.Logger
}

// entryTimeout is how long the kernel may cache names and attributes. Every
// name maps to the same bytes for the life of the mount, so the only reason
// not to cache forever is to let the kernel reclaim memory. Names get it
// only as rootNode.cacheName says: go-fuse keeps a node for as long
// as the kernel keeps its name, and the kernel keeps a name with a
// timeout until memory runs short, so every name it caches is daemon
// memory too.
const entryTimeout = time.Hour

// maxCachedInodes bounds the nodes whose names the kernel may cache (about
// 450 bytes of daemon memory each, measured): beyond it, names are looked
// up anew each time, and the kernel forgets them as soon as nobody uses
// them. It is far above the names a mount lists with the default flags.
const maxCachedInodes = 16 << 10

// The requests the daemon serves at once are bounded, since each read in
// flight holds a reply buffer of up to maxRequest bytes in the Go heap
// (go-fuse allocates it before the handler runs) and each request an input
// buffer of as much (mostly untouched: requests other than writes are
// small). The kernel sends at most maxBackground reads at a time for
// buffered reads of all files together (readahead, and the reads that
// wait for it); O_DIRECT readers and page faults send reads of their own,
// one per reader, which maxInflight bounds. Reads that wait (for memory,
// for a load) never wait for another request, so the bound cannot
// deadlock. Measured at --max-memory 16MiB, 256 readers of 1 MiB reads:
// peak RSS 91 to 100 MiB with maxBackground 64 and no maxInflight, 56 to
// 63 MiB with these; 256 O_DIRECT readers: 65 MiB.
const (
	maxRequest    = 1 << 20
	maxBackground = 16
	maxInflight   = 16
)

// RequestMemory is the Go heap that the reply buffers of requests in
// flight may hold at most, whatever the number of readers. Their input
// buffers, as large, stay mostly untouched (the kernel writes only the
// request into them, and only writes are large).
const RequestMemory = maxInflight * maxRequest

// Mount mounts corgifs at cfg.Mountpoint and serves it until Unmount. When
// ctx is done the file system is unmounted.
func Mount(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Epochs < 0 || cfg.Parts < 1 {
		return nil, fmt.Errorf("mount: epochs must be >= 0 and parts >= 1")
	}
	info, err := json.MarshalIndent(cfg.Info, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("mount: config.json: %w", err)
	}
	root := &rootNode{cfg: &cfg, owner: uint32(os.Getuid()), info: append(info, '\n'), mtime: mountTime(cfg.Planner.Index()), forget: newForgetter()}
	timeout := entryTimeout
	opts := &gofs.Options{
		// No EntryTimeout: a lookup that sets none gives the kernel 0, so
		// that it drops the name, and the node, once nobody uses it.
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		UID:             uint32(os.Getuid()),
		GID:             uint32(os.Getgid()),
		MountOptions: fuse.MountOptions{
			FsName: cfg.Planner.Index().Root,
			// The type in the mount table is then fuse.corgifs, which
			// 'corgifs unmount' checks before it detaches anything.
			Name: mountName,
			// The kernel enforces read-only for every mutating call (EROFS)
			// before it reaches us, unless feedback files are taken.
			Options: roOption(cfg.Feedback),
			// 1 MiB requests: fewer round trips through /dev/fuse per byte.
			MaxWrite:     maxRequest,
			MaxReadAhead: maxRequest,
			// Reads run concurrently (kernel readahead, several readers),
			// but each holds a reply buffer (see RequestMemory).
			MaxBackground: maxBackground,
			// go-fuse counts an input buffer of about maxRequest for each
			// request it holds, and past this stops taking requests until
			// one ends: at most maxInflight at once.
			MaxInflightRequestBytes: maxInflight * (maxRequest + 64<<10),
			// Replies are slices of our slabs, not file descriptors; the splice
			// path would only add a copy and, with a small pipe-max-size, log
			// an error on every 1 MiB reply.
			DisableSplice: true,
			// Parts are opened with direct I/O (rootNode.openFlags); this
			// lets readers map them all the same, through the page cache.
			ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
			// Root can mount without the setuid helper.
			DirectMount: os.Geteuid() == 0,
			AllowOther:  cfg.AllowOther,
			Debug:       cfg.Debug,
			PanicHandler: func(v any) fuse.Status {
				cfg.Logger.Error("panic in FUSE handler", "panic", v, "stack", string(debug.Stack()))
				return fuse.EIO
			},
		},
	}
	srv, err := gofs.Mount(cfg.Mountpoint, root, opts)
	if err != nil {
		if cause := mountCause(cfg.AllowOther); cause != "" {
			return nil, fmt.Errorf("mount %s: %w: %s", cfg.Mountpoint, err, cause)
		}
		return nil, fmt.Errorf("mount %s: %w", cfg.Mountpoint, err)
	}
	s := &Server{srv: srv, mnt: cfg.Mountpoint, log: cfg.Logger}
	stopForget := make(chan struct{})
	go root.forget.run(stopForget)
	go func() {
		srv.Wait()
		close(stopForget)
	}()
	if err := RaiseReadahead(cfg.Mountpoint); err != nil {
		cfg.Logger.Debug("could not raise readahead", "err", err)
	}
	go func() {
		<-ctx.Done()
		s.Unmount()
	}()
	return s, nil
}

// roOption is the mount option that makes the kernel refuse every change,
// unless the mount takes feedback.
func roOption(fb *feedback.Store) []string {
	if fb != nil {
		return nil
	}
	return []string{"ro"}
}

// RaiseReadahead asks the kernel to read ahead 4 MiB on the FUSE mount at
// mnt (the default, 128 KiB, leaves a sequential reader waiting on round
// trips). It needs root; without it the default stays.
func RaiseReadahead(mnt string) error {
	dev, err := mountDevice(mnt)
	if err != nil {
		return err
	}
	p := "/sys/class/bdi/" + dev + "/read_ahead_kb"
	if err := os.WriteFile(p, []byte("4096"), 0); err != nil {
		return fmt.Errorf("raise readahead: %w", err)
	}
	return nil
}

// Wait blocks until the file system is unmounted.
func (s *Server) Wait() { s.srv.Wait() }

// Unmount unmounts the file system; if it is busy, it detaches it lazily so
// that the mount point is free at once and open files end with the process.
func (s *Server) Unmount() error {
	err := s.srv.Unmount()
	if err == nil {
		return nil
	}
	// go-fuse returns fusermount's stderr with its exit status on separate
	// lines ("...busy\n (code exit status 1)\n"): one line in the log.
	msg := strings.Replace(strings.Join(strings.Fields(err.Error()), " "), " (code exit status", " (exit status", 1)
	s.log.Warn("mount busy, detaching lazily", "mountpoint", s.mnt, "err", msg)
	if err := LazyUnmount(s.mnt); err != nil {
		return err
	}
	return nil
}

// LazyUnmount detaches the mount at mnt even if it is busy or its daemon is
// dead: umount2(MNT_DETACH) as root, fusermount3 -u -z otherwise.
func LazyUnmount(mnt string) error {
	var direct error
	if os.Geteuid() == 0 {
		if direct = syscall.Unmount(mnt, syscall.MNT_DETACH); direct == nil {
			return nil
		}
	}
	for _, prog := range []string{"fusermount3", "fusermount"} {
		if err := runQuiet(prog, "-u", "-z", mnt); err == nil {
			return nil
		} else if !errors.Is(err, errNotFound) {
			return fmt.Errorf("unmount %s: %w", mnt, err)
		}
	}
	if direct != nil {
		return fmt.Errorf("unmount %s: umount2: %w (and no fusermount3)", mnt, direct)
	}
	return fmt.Errorf("unmount %s: no umount2 permission and no fusermount3", mnt)
}

func mountTime(ix *index.Index) time.Time {
	var t int64
	for _, f := range ix.Files {
		t = max(t, f.Mtime)
	}
	return time.Unix(0, t)
}

func setTimes(a *fuse.Attr, t time.Time) {
	a.SetTimes(&t, &t, &t)
}

// parseEpoch accepts only the canonical name epoch-%04d, so that every epoch
// has exactly one name.
func parseEpoch(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "epoch-")
	if !ok {
		return 0, false
	}
	e, err := strconv.Atoi(s)
	if err != nil || e < 0 || shuffler.EpochName(e) != name {
		return 0, false
	}
	return e, true
}

// parsePart accepts only the canonical name shuffler.PartName gives, with
// the format's extension ext, and K at most MaxParts.
func parsePart(name, ext string) (part, parts int, ok bool) {
	i, k, ok := shuffler.ParsePartName(name, ext)
	if !ok || k > MaxParts {
		return 0, 0, false
	}
	return i, k, true
}

// MaxParts bounds K, the number of parts of an epoch, so that a hostile name
// cannot make a plan of absurd size. The CLI refuses a larger --parts, so
// that every listed name resolves.
const MaxParts = 1 << 20

func partName(i, k int, ext string) string { return shuffler.PartName(i, k, ext) }

// ext returns the extension of the part files: the format's.
func (r *rootNode) ext() string { return r.cfg.Planner.Index().Fmt().Ext() }
