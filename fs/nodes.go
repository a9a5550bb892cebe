package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/shuffler"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

type rootNode struct {
	gofs.Inode
	readOnly
	cfg   *Config
	info  []byte
	mtime time.Time
	// owner is the mount's owner, the daemon's uid: it may write feedback.
	owner uint32
	// replies recycles the sliceReplies of part reads.
	replies sync.Pool
	// served counts the bytes of parts served, sliced those of them the
	// kernel copied straight from the slabs.
	served, sliced atomic.Int64
	// inodes counts the live nodes below the root (see counted).
	inodes atomic.Int64
	// direct counts the parts open with direct I/O (openFlags).
	direct atomic.Int64
	forget *forgetter
}

// counted makes a node count itself among its root's live inodes: go-fuse
// calls OnAdd when it takes a node made by a lookup and OnForget once the
// kernel has forgotten it (a lookup always makes a new node, so a node
// is never revived after OnForget).
type counted struct{ live *atomic.Int64 }

func (c counted) OnAdd(context.Context) { c.live.Add(1) }
func (c counted) OnForget()             { c.live.Add(-1) }

// cacheName lets the kernel cache a name that dir's Lookup has just
// resolved for entryTimeout if it is listed (ls shows it: the names users
// walk again and again) and fewer than maxCachedInodes nodes live. Any
// other name has a timeout of 0 and is dropped by the forgetter, so that
// looking up any number of valid names (any epoch, any K) costs the
// daemon nothing that lasts.
func (r *rootNode) cacheName(dir *gofs.Inode, name string, out *fuse.EntryOut, listed bool) {
	if listed && r.inodes.Load() < maxCachedInodes {
		out.SetEntryTimeout(entryTimeout)
		return
	}
	r.forget.add(dir, name)
}

// dirAttr fills the attributes of one of the mount's directories: perm is
// 0o555 but for the feedback epochs, which a trainer writes into.
func (r *rootNode) dirAttr(a *fuse.Attr, perm uint32) {
	a.Mode = syscall.S_IFDIR | perm
	setTimes(a, r.mtime)
}

// lookupDir answers a Lookup in parent that found the directory node, so
// that every directory is given the same attributes and cache rule
// (listed, as for cacheName).
func (r *rootNode) lookupDir(ctx context.Context, parent *gofs.Inode, name string, node gofs.InodeEmbedder, perm uint32, listed bool, out *fuse.EntryOut) *gofs.Inode {
	r.dirAttr(&out.Attr, perm)
	r.cacheName(parent, name, out, listed)
	return parent.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFDIR})
}

// lookupCtlFile answers a Lookup in parent that found a listed control
// file, whose bytes content makes.
func (r *rootNode) lookupCtlFile(ctx context.Context, parent *gofs.Inode, name string, content func() []byte, out *fuse.EntryOut) *gofs.Inode {
	f := &ctlFile{counted: counted{&r.inodes}, content: content, mtime: r.mtime}
	f.attr(&out.Attr)
	r.cacheName(parent, name, out, true)
	return parent.NewInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG})
}

var (
	_ gofs.NodeLookuper  = (*rootNode)(nil)
	_ gofs.NodeReaddirer = (*rootNode)(nil)
	_ gofs.NodeGetattrer = (*rootNode)(nil)
)

const ctlDir = api.Dir

func (r *rootNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r.dirAttr(&out.Attr, 0o555)
	return 0
}

func (r *rootNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	entries := make([]fuse.DirEntry, 0, r.cfg.Epochs+1)
	entries = append(entries, fuse.DirEntry{Name: ctlDir, Mode: syscall.S_IFDIR})
	for e := range r.cfg.Epochs {
		entries = append(entries, fuse.DirEntry{Name: shuffler.EpochName(e), Mode: syscall.S_IFDIR})
	}
	return gofs.NewListDirStream(entries), 0
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if p := r.cfg.PanicOnLookup; p != "" && name == p {
		panic("test hook: lookup of " + name + " (CORGIFS_TEST_PANIC_LOOKUP)")
	}
	if name == ctlDir {
		return r.lookupDir(ctx, &r.Inode, name, &ctlNode{counted: counted{&r.inodes}, root: r}, 0o555, true, out), 0
	}
	e, ok := parseEpoch(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	// Every epoch directory may be cached (within maxCachedInodes), also
	// past --epochs: a trainer walks into it for each of its parts.
	return r.lookupDir(ctx, &r.Inode, name, &epochNode{counted: counted{&r.inodes}, root: r, epoch: e}, 0o555, true, out), 0
}

type epochNode struct {
	gofs.Inode
	readOnly
	counted
	root  *rootNode
	epoch int
}

var (
	_ gofs.NodeLookuper    = (*epochNode)(nil)
	_ gofs.NodeReaddirer   = (*epochNode)(nil)
	_ gofs.NodeGetattrer   = (*epochNode)(nil)
	_ gofs.NodeOnAdder     = (*epochNode)(nil)
	_ gofs.NodeOnForgetter = (*epochNode)(nil)
)

func (d *epochNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.root.dirAttr(&out.Attr, 0o555)
	return 0
}

func (d *epochNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	k := d.root.cfg.Parts
	entries := make([]fuse.DirEntry, k)
	for i := range entries {
		entries[i] = fuse.DirEntry{Name: partName(i, k, d.root.ext()), Mode: syscall.S_IFREG}
	}
	return gofs.NewListDirStream(entries), 0
}

func (d *epochNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if strings.HasPrefix(name, shuffler.ResumePrefix) {
		return d.root.lookupResume(ctx, &d.Inode, d.epoch, nil, name, out)
	}
	i, k, ok := parsePart(name, d.root.ext())
	if !ok {
		return nil, syscall.ENOENT
	}
	size, err := d.root.cfg.Planner.Size(d.epoch, i, k)
	if err != nil {
		return nil, syscall.ENOENT
	}
	p := &partNode{counted: counted{&d.root.inodes}, root: d.root, epoch: d.epoch, part: i, parts: k, size: size}
	p.attr(&out.Attr)
	d.root.cacheName(&d.Inode, name, out, d.epoch < d.root.cfg.Epochs && k == d.root.cfg.Parts)
	return d.NewInode(ctx, p, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
}

// partNode is one part file. It keeps only its size: the plan is taken
// at open from the planner, which shares it between the open files of the
// part and drops it when the last closes, so that the kernel's cache of
// looked-up names does not pin plans (a record-level plan holds 4 bytes
// per record).
type partNode struct {
	gofs.Inode
	readOnly
	counted
	root               *rootNode
	epoch, part, parts int
	size               int64
	// plan, when set, is the part's own plan (a resume's, resume.go),
	// not one the planner shares.
	plan *shuffler.Plan
}

var (
	_ gofs.NodeOpener      = (*partNode)(nil)
	_ gofs.NodeGetattrer   = (*partNode)(nil)
	_ gofs.NodeOnAdder     = (*partNode)(nil)
	_ gofs.NodeOnForgetter = (*partNode)(nil)
)

func (p *partNode) attr(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | 0o444
	// One link: with none, link(2) on a read-write (feedback) mount fails
	// ENOENT in the kernel before readOnly can answer EROFS.
	a.Nlink = 1
	a.Size = uint64(p.size)
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 1 << 20
	setTimes(a, p.root.mtime)
}

func (p *partNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	p.attr(&out.Attr)
	out.SetTimeout(entryTimeout)
	return 0
}

func (p *partNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	s, err := p.openStream()
	if err != nil {
		p.root.cfg.Logger.Error("open: no plan", "err", err)
		return nil, 0, syscall.EIO
	}
	h := &partHandle{s: s, log: p.root.cfg.Logger, node: p}
	return h, p.root.openFlags(h), 0
}

// openFlags are the flags of the part h opens: direct I/O while fewer
// than maxDirect parts are open so, else (and always with
// Config.PageCache) the kernel's page cache.
//
// With direct I/O the kernel copies a reply straight into the reader's
// buffer. Through the page cache it first takes a fresh page for every 4
// KiB its readahead asks for, copies the reply into it, copies it again to
// the reader, and frees it when dropBehind asks: on warm epochs of 1 KiB
// records the reader's CPU was mostly page allocation and a tenth of the
// daemon's went to freeing, and direct I/O served epochs several times
// faster (BENCHMARKS.md, "Issue 25: the reader's side"). The price is a
// round trip per read(2): a reader of 4 KiB at a time is slower, one of 64
// KiB or more (a part's st_blksize is 1 MiB, which stdio, Python and cat
// read by) faster. A mapped part is still read through the page cache
// (CAP_DIRECT_IO_ALLOW_MMAP), and dropBehind drops its passed pages.
//
// The kernel bounds the reads it sends for the page cache's readahead
// (maxBackground), but not direct reads: one each per reader. Beyond
// maxDirect open parts, 256 direct readers at --max-memory 16MiB took the
// daemon's heap to its soft limit and past the memory bound (81 MiB, 568
// MiB with the race detector, against 63 and 205 through the page
// cache), so further parts go through the page cache.
func (r *rootNode) openFlags(h *partHandle) uint32 {
	if !r.cfg.PageCache && r.direct.Add(1) <= maxDirect {
		h.direct = true
		return fuse.FOPEN_DIRECT_IO
	}
	if !r.cfg.PageCache {
		r.direct.Add(-1)
	}
	// The bytes of a part never change, so pages cached by the kernel from
	// an earlier open stay valid.
	return fuse.FOPEN_KEEP_CACHE
}

// maxDirect bounds the parts open with direct I/O at once (openFlags): as
// many as the kernel sends readahead requests at once, so that direct
// readers have no more reads in flight than cached ones.
const maxDirect = maxBackground

type partHandle struct {
	s    *shuffler.Stream
	log  *slog.Logger
	node *partNode
	// dropped is the end of the range of the part that Read last asked
	// the kernel to drop from its cache.
	dropped atomic.Int64
	// direct is set when the part was opened with direct I/O, and counted
	// in its root's direct.
	direct bool
}

var (
	_ gofs.FileReader   = (*partHandle)(nil)
	_ gofs.FileReleaser = (*partHandle)(nil)
)

// Pages of a part that the kernel caches (past maxDirect open parts, with
// Config.PageCache, or a mapped part) stay until the file is closed: a
// whole epoch, gigabytes, that nobody reads again, pushing the source
// files out of the page cache. Worse, each reply is then copied into pages
// the kernel has to find anew, which measured slower than the rest of
// serving the read (BENCHMARKS.md). So Read has the kernel drop what lies
// more than keepBehind behind the furthest read, in steps of dropStep,
// and the kernel copies replies into pages it just freed. A reader that
// steps back further is served again by the daemon, with the same bytes.
// Larger steps make the notification a smaller share of the daemon's CPU
// (17% at 32 MiB, 1% at 1 GiB) but not the epoch faster, since the kernel
// frees each page whoever asks, and let a part hold more of the page
// cache (BENCHMARKS.md, "Issue 25: the reader's side").
const (
	keepBehind = 16 << 20
	dropStep   = 32 << 20
)

func (h *partHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	root := h.node.root
	r, _ := root.replies.Get().(*sliceReply)
	if r == nil {
		r = &sliceReply{pool: &root.replies}
	}
	vecs, n, hold, err := h.s.ReadSlices(ctx, dest, r.vecs[:0], off)
	r.vecs = vecs
	if hold != nil {
		r.s, r.hold, r.size = h.s, hold, n
	} else {
		r.Done()
		r = nil
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, syscall.EINTR
		}
		plan := h.s.Plan()
		h.log.Error("read failed", "epoch", plan.Epoch, "part", plan.Part, "parts", plan.Parts, "offset", off, "err", err)
		return nil, syscall.EIO
	}
	h.dropBehind(off + int64(n))
	root.served.Add(int64(n))
	if r != nil {
		root.sliced.Add(int64(n))
		return r, 0
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// sliceReply is a reply that the kernel copies straight from slices of a
// loaded buffer (go-fuse writes it with writev(2)), so the bytes of a read
// are copied once, not twice. It holds the buffer until go-fuse is done.
type sliceReply struct {
	s    *shuffler.Stream
	hold *blockcache.Buf
	vecs [][]byte
	size int
	pool *sync.Pool
}

func (r *sliceReply) Size() int                       { return r.size }
func (r *sliceReply) Slices() ([][]byte, fuse.Status) { return r.vecs, fuse.OK }

// Bytes serves go-fuse's paths that need one contiguous buffer.
func (r *sliceReply) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, v := range r.vecs {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

func (r *sliceReply) Done() {
	if r.hold != nil {
		r.s.Done(r.hold)
	}
	clear(r.vecs)
	r.s, r.hold, r.vecs = nil, nil, r.vecs[:0]
	r.pool.Put(r)
}

// dropBehind asks the kernel to drop the part's pages that lie keepBehind
// or more before end. Concurrent reads race to move the mark; the one that
// wins asks, for the range between the old mark and the new one only: the
// pages before the old mark were dropped by the previous notification, and
// asking for them again from offset 0 made the kernel walk the whole passed
// range every step (a fifth of the daemon's CPU in profiles of warm epochs).
// The notification goes from a goroutine since the kernel may wait for
// replies to requests in flight before it takes it.
func (h *partHandle) dropBehind(end int64) {
	mark := end - keepBehind
	old := h.dropped.Load()
	if mark < old+dropStep || !h.dropped.CompareAndSwap(old, mark) {
		return
	}
	go h.node.NotifyContent(old, mark-old)
}

func (h *partHandle) Release(ctx context.Context) syscall.Errno {
	h.s.Close()
	if h.direct {
		h.node.root.direct.Add(-1)
	}
	// An epoch is read once: keeping its pages in the kernel's cache after
	// the reader is done would only push out the source files' pages, which
	// the next epoch needs. Dropped from a goroutine, since the kernel may
	// not take a notification while it waits for this reply.
	go h.node.NotifyContent(0, 0)
	return 0
}

// ctlNode is the .corgifs directory.
type ctlNode struct {
	gofs.Inode
	readOnly
	counted
	root *rootNode
}

var (
	_ gofs.NodeLookuper  = (*ctlNode)(nil)
	_ gofs.NodeReaddirer = (*ctlNode)(nil)
)

func (c *ctlNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	entries := []fuse.DirEntry{
		{Name: api.ConfigFile, Mode: syscall.S_IFREG},
		{Name: api.StatsFile, Mode: syscall.S_IFREG},
	}
	if c.root.cfg.Feedback != nil {
		entries = append(entries, fuse.DirEntry{Name: feedbackDir, Mode: syscall.S_IFDIR})
	}
	return gofs.NewListDirStream(entries), 0
}

func (c *ctlNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	var content func() []byte
	switch name {
	case feedbackDir:
		if c.root.cfg.Feedback == nil {
			return nil, syscall.ENOENT
		}
		return c.root.lookupDir(ctx, &c.Inode, name, &fbDirNode{counted: counted{&c.root.inodes}, root: c.root}, 0o555, true, out), 0
	case api.ConfigFile:
		content = func() []byte { return c.root.info }
	case api.StatsFile:
		content = c.root.stats
	default:
		return nil, syscall.ENOENT
	}
	return c.root.lookupCtlFile(ctx, &c.Inode, name, content, out), 0
}

func (r *rootNode) stats() []byte {
	s := api.Stats{Stats: r.cfg.Loader.Stats(), BytesServed: r.served.Load(), BytesServedFromSlabs: r.sliced.Load(), Goroutines: runtime.NumGoroutine(), OpenFDs: -1,
		Inodes: r.inodes.Load(), Plans: r.cfg.Planner.Stats()}
	if fb := r.cfg.Feedback; fb != nil {
		st := fb.Stats()
		s.Feedback = &st
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.OpenFDs = len(fds) - 1 // less the descriptor that reads the directory
	}
	if r.cfg.SourceStats != nil {
		s.Source = r.cfg.SourceStats()
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}

// ctlFile is a small file whose content is taken when it is opened.
type ctlFile struct {
	gofs.Inode
	readOnly
	counted
	content func() []byte
	mtime   time.Time
}

var (
	_ gofs.NodeOpener    = (*ctlFile)(nil)
	_ gofs.NodeGetattrer = (*ctlFile)(nil)
	_ gofs.NodeReader    = (*ctlFile)(nil)
)

func (f *ctlFile) attr(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | 0o444
	a.Nlink = 1
	a.Size = uint64(len(f.content()))
	setTimes(a, f.mtime)
}

func (f *ctlFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.attr(&out.Attr)
	out.SetTimeout(0) // stats.json changes
	return 0
}

type snapshot []byte

func (f *ctlFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	// Direct I/O: the size given at lookup may already be stale for stats.json.
	return snapshot(f.content()), fuse.FOPEN_DIRECT_IO, 0
}

func (f *ctlFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, _ := fh.(snapshot)
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(b[off:min(int64(len(b)), off+int64(len(dest)))]), 0
}

var errNotFound = exec.ErrNotFound

func runQuiet(prog string, args ...string) error {
	if _, err := exec.LookPath(prog); err != nil {
		return errNotFound
	}
	out, err := exec.Command(prog, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", prog, err, out)
	}
	return nil
}
