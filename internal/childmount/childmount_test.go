//go:build linux

package childmount

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartReportsAServerThatExitsBeforeServing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mnt")
	_, err := Start(context.Background(), Config{Argv: []string{"sh", "-c", "exit 3"}, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want the exit status", err)
	}
}

func TestStartEndsAServerThatNeverServes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mnt")
	var c *Child
	_, err := Start(context.Background(), Config{Argv: []string{"sleep", "60"}, Dir: dir, Timeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "did not appear") {
		t.Fatalf("err = %v, want a timeout", err)
	}
	// The same through a cancelled context, keeping the child to look at.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var err error
		c, err = Start(ctx, Config{Argv: []string{"sleep", "60"}, Dir: dir})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || c != nil {
		t.Fatalf("Start with a cancelled context: %v, %v", c, err)
	}
}

func TestStopChecksTheExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name, onTerm string
		ok           bool
	}{{"exit0", "exit 0", true}, {"exit1", "exit 1", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			script := "trap '" + tc.onTerm + "' TERM; touch " + ready + "; while :; do sleep 0.05; done"
			c, err := Start(context.Background(), Config{Argv: []string{"sh", "-c", script}, Dir: filepath.Join(dir, "mnt"), Ready: ready})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Stop(10 * time.Second)
			if (err == nil) != tc.ok {
				t.Fatalf("Stop: %v, want ok=%v", err, tc.ok)
			}
			if !c.Exited() {
				t.Fatal("the child is still running after Stop")
			}
			if err := c.Stop(time.Second); !errors.Is(err, ErrExited) {
				t.Fatalf("second Stop: %v, want ErrExited", err)
			}
		})
	}
}

func TestKillEndsAChildThatIgnoresSIGTERM(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	c, err := Start(context.Background(), Config{Argv: []string{"sh", "-c", "trap '' TERM; touch " + ready + "; while :; do sleep 0.05; done"},
		Dir: filepath.Join(dir, "mnt"), Ready: ready})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(300 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not exit") {
		t.Fatalf("Stop of a child that ignores SIGTERM: %v", err)
	}
	var ee interface{ Sys() any }
	if !errors.As(c.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit %v, want killed", c.Err())
	}
}

func TestMountedReadsTheMountTable(t *testing.T) {
	if !Mounted("/") {
		t.Error("/ is not mounted")
	}
	if Mounted(t.TempDir()) {
		t.Error("a new directory is mounted")
	}
	if got := unescape(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("unescape = %q", got)
	}
}
