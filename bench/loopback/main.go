// Command loopback mounts a directory read-only at a mount point through
// go-fuse's plain passthrough file system (fs.NewLoopbackRoot), tuned like
// corgifs (1 MiB requests and readahead, 16 background requests, no splice,
// 4 MiB kernel readahead, names and attributes cached for an hour), and
// serves it until SIGINT or SIGTERM. It is the baseline of the corgifs
// benchmark: the cost of FUSE itself with go-fuse.
//
// By default every read goes through this process, as every read of corgifs
// does: go-fuse's LoopbackFile would otherwise offer its descriptor to the
// kernel's FUSE passthrough (FOPEN_PASSTHROUGH, Linux 6.9 and later, as
// root), and the kernel would then read the source file itself, bypassing
// the daemon. --kernel-passthrough leaves that on. --direct-io opens files
// with FOPEN_DIRECT_IO, as corgifs opens its parts: the kernel then copies
// each reply straight into the reader's buffer, without its page cache.
//
// Usage: loopback [--kernel-passthrough | --direct-io] SRC MNT
package main

import (
	"context"
	"flag"
	"fmt"
	corgifs "github.com/corgifs/corgifs/fs"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	kernel := flag.Bool("kernel-passthrough", false, "let the kernel read files itself (FUSE passthrough) where it can")
	direct := flag.Bool("direct-io", false, "open files with direct I/O (FOPEN_DIRECT_IO), as corgifs opens its parts")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: loopback [--kernel-passthrough | --direct-io] SRC MNT\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	if *kernel && *direct {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *kernel, *direct); err != nil {
		fmt.Fprintf(os.Stderr, "loopback: %v\n", err)
		os.Exit(1)
	}
}

func run(src, mnt string, kernelPassthrough, direct bool) error {
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		return err
	}
	if !kernelPassthrough {
		n := &node{LoopbackNode: root.(*fs.LoopbackNode), direct: direct}
		n.RootData.RootNode = n
		root = n
	}
	// Names and attributes cached as long as corgifs lets the kernel cache
	// them (an hour): with go-fuse's default of none, the kernel asks for
	// the attributes again before every read(2) of a file (auto_inval_data),
	// a round trip corgifs does not pay.
	timeout := time.Hour
	srv, err := fs.Mount(mnt, root, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:       src,
			Name:         "loopback",
			Options:      []string{"ro"},
			MaxWrite:     1 << 20,
			MaxReadAhead: 1 << 20,
			// corgifs's bounds on the requests in flight (fs/fs.go).
			MaxBackground:           16,
			MaxInflightRequestBytes: 16 * (1<<20 + 64<<10),
			DisableSplice:           true,
			DirectMount:             os.Geteuid() == 0,
		},
	})
	if err != nil {
		return fmt.Errorf("mount %s: %w", mnt, err)
	}
	// The same kernel readahead as corgifs sets for its own mounts.
	if err := corgifs.RaiseReadahead(mnt); err != nil {
		fmt.Fprintf(os.Stderr, "loopback: %v\n", err)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-sig:
	}
	if err := srv.Unmount(); err != nil {
		return fmt.Errorf("unmount %s: %w", mnt, err)
	}
	<-done
	return nil
}

// node is a loopback node whose open files are served by this process.
type node struct {
	*fs.LoopbackNode
	direct bool // open files with FOPEN_DIRECT_IO
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
)

// WrapChild makes every node below the root a node too.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if l, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: l, direct: n.direct}
	}
	return ops
}

// Open opens the file as the loopback does, but hands out a file that does
// not offer its descriptor for FUSE passthrough.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh, fuseFlags, 0
	}
	if n.direct {
		fuseFlags |= fuse.FOPEN_DIRECT_IO
	}
	return &file{lf}, fuseFlags, 0
}

// file forwards the calls a reader makes to a LoopbackFile. It holds the
// LoopbackFile in a named field, not embedded, so that it does not have its
// PassthroughFd method.
type file struct{ lf *fs.LoopbackFile }

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
)

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, dest, off)
}

func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

func (f *file) Flush(ctx context.Context) syscall.Errno { return f.lf.Flush(ctx) }

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}
