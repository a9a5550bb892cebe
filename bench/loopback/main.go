// Command loopback mounts a directory read-only at a mount point through
// go-fuse's plain passthrough file system (fs.NewLoopbackRoot), tuned like
// corgifs (1 MiB requests and readahead, 64 background requests, no splice,
// 4 MiB kernel readahead), and serves it until SIGINT or SIGTERM. It is the
// baseline of the corgifs benchmark: the cost of FUSE itself with go-fuse.
//
// Usage: loopback SRC MNT
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintf(os.Stderr, "usage: loopback SRC MNT\n")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "loopback: %v\n", err)
		os.Exit(1)
	}
}

func run(src, mnt string) error {
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		return err
	}
	srv, err := fs.Mount(mnt, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:        src,
			Name:          "loopback",
			Options:       []string{"ro"},
			MaxWrite:      1 << 20,
			MaxReadAhead:  1 << 20,
			MaxBackground: 64,
			DisableSplice: true,
			DirectMount:   os.Geteuid() == 0,
		},
	})
	if err != nil {
		return fmt.Errorf("mount %s: %w", mnt, err)
	}
	raiseReadahead(mnt)

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

// raiseReadahead sets the mount's kernel readahead to 4 MiB, as corgifs does
// for its own mounts. It needs root; without it the default stays.
func raiseReadahead(mnt string) {
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		return
	}
	major, minor := (st.Dev>>8)&0xfff, (st.Dev&0xff)|((st.Dev>>12)&0xfff00)
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major, minor)
	if err := os.WriteFile(p, []byte("4096"), 0); err != nil {
		fmt.Fprintf(os.Stderr, "loopback: could not raise readahead: %v\n", err)
	}
}
