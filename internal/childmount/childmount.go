// Package childmount runs a FUSE server as a child process and waits for
// its mount to serve. Every program of the project that reads a corgifs
// mount it started itself — `corgifs validate` and `demo`, the benchmarks,
// the end-to-end tests and the corgifstest harness — serves it from a child:
// a process that reads a FUSE mount it serves can deadlock (the kernel
// waits for an answer that only the blocked process can give).
package childmount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
)

// Config says how to start a child server.
type Config struct {
	// Argv is the command and its arguments, the mount point among them.
	Argv []string
	// Dir is the mount point; it is created if missing.
	Dir string
	// Ready is the file whose appearance means the mount serves; empty
	// means Dir/.corgifs/config.json, which corgifs serves once mounted.
	Ready string
	// Log receives the child's stdout and stderr; nil discards them.
	Log io.Writer
	// Timeout bounds the wait for Ready; zero means a minute.
	Timeout time.Duration
	// OwnGroup puts the child in its own process group, so that a ^C at
	// the terminal reaches only the parent, which then stops the child in
	// order. Either way the child gets SIGTERM when its parent dies.
	OwnGroup bool
}

// Child is a running server.
type Child struct {
	Dir  string
	Cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the exit status, set before done is closed
}

// Start starts the child and waits until its mount serves, the context is
// done, the child exits or the timeout passes. On failure the child is
// ended and its mount, if any, detached; the caller adds the log to the
// error.
func Start(ctx context.Context, c Config) (*Child, error) {
	if len(c.Argv) == 0 {
		return nil, errors.New("childmount: no command")
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("mount point: %w", err)
	}
	ready := c.Ready
	if ready == "" {
		ready = api.ConfigPath(c.Dir)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	if c.Log != nil {
		cmd.Stdout, cmd.Stderr = c.Log, c.Log
	}
	cmd.SysProcAttr = sysProcAttr(c.OwnGroup)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	ch := &Child{Dir: c.Dir, Cmd: cmd, done: make(chan struct{})}
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if _, err := os.Stat(ready); err == nil {
			return ch, nil
		}
		select {
		case <-ch.done:
			Detach(c.Dir)
			return nil, fmt.Errorf("%s exited before its mount at %s served: %v", filepath.Base(c.Argv[0]), c.Dir, ch.err)
		case <-deadline.C:
			ch.Kill(10 * time.Second)
			return nil, fmt.Errorf("%s did not appear within %v of starting %s", ready, timeout, filepath.Base(c.Argv[0]))
		case <-ctx.Done():
			ch.Kill(10 * time.Second)
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// PID is the child's process id.
func (c *Child) PID() int { return c.Cmd.Process.Pid }

// Done is closed when the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is the child's exit status (nil for 0); valid once Done is closed.
func (c *Child) Err() error {
	<-c.done
	return c.err
}

// Exited reports whether the child has exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// ErrExited is returned (wrapped) by Stop when the child had exited before.
var ErrExited = errors.New("the server had already exited")

// Stop sends SIGTERM and checks that the child exits with status 0 within
// grace and leaves nothing mounted. Whatever goes wrong, the child is gone
// and its mount detached when Stop returns (but see Kill).
func (c *Child) Stop(grace time.Duration) error {
	if c.Exited() {
		if Mounted(c.Dir) {
			Detach(c.Dir)
			return fmt.Errorf("%w (%v) and left %s mounted", ErrExited, c.err, c.Dir)
		}
		return fmt.Errorf("%w: %v", ErrExited, c.err)
	}
	c.Cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		err := c.Kill(grace)
		return errors.Join(fmt.Errorf("pid %d did not exit within %v of SIGTERM", c.PID(), grace), err)
	}
	if c.err != nil {
		Detach(c.Dir)
		return fmt.Errorf("pid %d: %v after SIGTERM, want exit status 0", c.PID(), c.err)
	}
	if Mounted(c.Dir) {
		Detach(c.Dir)
		return fmt.Errorf("pid %d exited but left %s mounted", c.PID(), c.Dir)
	}
	return nil
}

// Kill ends the child without ceremony: SIGKILL, a lazy unmount of its
// mount (a killed FUSE server leaves it dead, and a server blocked on its
// own mount can only die once it is detached), then a wait of up to grace.
// It reports only a child that does not die or a mount that stays.
func (c *Child) Kill(grace time.Duration) error {
	if !c.Exited() {
		c.Cmd.Process.Kill()
	}
	Detach(c.Dir)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		return fmt.Errorf("pid %d still running %v after SIGKILL", c.PID(), grace)
	}
	if Mounted(c.Dir) {
		if err := Detach(c.Dir); err != nil {
			return err
		}
	}
	return nil
}

// LogBuffer collects a child's log: exec.Cmd's copying goroutine writes it
// while the caller reads it, so both go through a lock.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
