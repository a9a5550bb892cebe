package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/fs"
)

// shutdownSignals end a mount: SIGHUP too, because closing the terminal of
// a foreground mount must not leave a dead mount behind.
var shutdownSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

const (
	// unmountWait bounds the normal unmount: open files (kept open, the
	// mount is detached lazily and they end with the process) or a handler
	// stuck in a source read that never returns (a hung NFS server) must not
	// keep the daemon alive.
	unmountWait = 3 * time.Second
	// detachWait bounds the lazy detach itself, which should never block
	// but runs a helper program when not root.
	detachWait = 2 * time.Second
)

// signalError is the cause of the context a shutdown signal cancels.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "signal " + e.sig.String() }

// notifyShutdown returns a context cancelled by the first shutdown signal,
// with that signal as its cause, and a channel that receives every later
// one. stop restores the default handling.
func notifyShutdown() (ctx context.Context, again <-chan os.Signal, stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, shutdownSignals...)
	ctx, cancel := context.WithCancelCause(context.Background())
	later := make(chan os.Signal, 4)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(signalError{s})
		case <-quit:
			return
		}
		for {
			select {
			case s := <-ch:
				select {
				case later <- s:
				default:
				}
			case <-quit:
				return
			}
		}
	}()
	return ctx, later, func() {
		signal.Stop(ch)
		close(quit)
		cancel(nil)
	}
}

// signalOf names the signal that cancelled ctx.
func signalOf(ctx context.Context) string {
	if e, ok := context.Cause(ctx).(signalError); ok {
		return e.sig.String()
	}
	return "none"
}

// exitIfStuck ends the process if, after the first shutdown signal, the
// work that should notice it has not returned within unmountWait (indexing
// stuck in a source read), or at once on a second signal. Nothing is
// mounted yet, so there is nothing to undo. Closing done disarms it.
func exitIfStuck(ctx context.Context, again <-chan os.Signal, done <-chan struct{}, log *slog.Logger) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	select {
	case <-done:
		return
	case s := <-again:
		log.Warn("second signal: exiting now", "signal", s.String())
	case <-time.After(unmountWait):
		log.Warn("still busy after the signal (a source read that does not return?); exiting", "wait", unmountWait)
	}
	os.Exit(1)
}

// shutdown unmounts srv after a signal, bounded whatever its handlers are
// doing: a normal unmount for up to unmountWait, then a lazy detach and
// return, so that the process exits and the kernel ends the reads still
// open on the detached mount with an error. A second signal skips the wait.
// It returns an error only if mnt could not be detached.
func shutdown(srv *fs.Server, mnt string, served <-chan struct{}, again <-chan os.Signal, log *slog.Logger) error {
	// Unmount waits for the handlers to return, and one stuck in a source
	// read never does: it runs on its own while the deadline runs here.
	go func() {
		if err := srv.Unmount(); err != nil {
			log.Error("unmount failed", "mountpoint", mnt, "err", err)
		}
	}()
	select {
	case <-served:
		return nil
	case s := <-again:
		log.Warn("second signal: detaching and exiting now", "signal", s.String(), "mountpoint", mnt)
	case <-time.After(unmountWait):
		// Open files on a lazily detached mount, or a handler stuck in
		// a source read: exiting closes the FUSE connection and their
		// reads end with an error.
		log.Warn("handlers or open files still busy; detaching and exiting",
			"wait", unmountWait, "mountpoint", mnt)
	}
	return detach(mnt)
}

// detach lazily detaches mnt unless it is already gone, giving up after
// detachWait.
func detach(mnt string) error {
	// The normal unmount, still running, may get through at any moment.
	gone := func() bool {
		typ, err := fs.MountType(mnt)
		return err != nil || typ != fs.MountTypeName
	}
	if gone() {
		return nil
	}
	res := make(chan error, 1)
	go func() { res <- fs.LazyUnmount(mnt) }()
	select {
	case err := <-res:
		if err != nil && gone() {
			return nil
		}
		return err
	case <-time.After(detachWait):
		return fmt.Errorf("lazy detach of %s did not return within %v; run 'corgifs unmount %s'", mnt, detachWait, mnt)
	}
}
