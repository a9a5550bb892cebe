package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestValidateEndedMidRunLeavesNoWorkDirectoryOrMountBehind: validate
// works in a corgifs-validate-* directory of $TMPDIR holding its mounts.
// Whether its output's reader goes away (validate 2>&1 | head) or it gets
// SIGINT or SIGTERM while it trains, it exits and removes that directory,
// and no mount of it is left.
func TestValidateEndedMidRunLeavesNoWorkDirectoryOrMountBehind(t *testing.T) {
	fuseOK(t)
	train, test := feedbackData(t)
	for _, how := range []string{"reader gone", "SIGINT", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			tmp := t.TempDir()
			cmd := exec.Command(bin, "validate", "--data", train, "--test", test, "--model", "logistic", "--strategies", "corgipile,full,grab",
				"--epochs", "20", "--batch", "8", "--block-size", "8KiB", "--seed", "4", "--via", "mount", "--cache-dir", t.TempDir())
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr = w, w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// The work directory exists once the first epoch is done.
			sc := bufio.NewScanner(r)
			for sc.Scan() && !strings.Contains(sc.Text(), "epoch done") {
			}
			switch how {
			case "reader gone":
				r.Close()
			case "SIGINT":
				cmd.Process.Signal(syscall.SIGINT)
			case "SIGTERM":
				cmd.Process.Signal(syscall.SIGTERM)
			}
			if how != "reader gone" {
				go func() {
					for sc.Scan() {
					}
					r.Close()
				}()
			}
			select {
			case err := <-done:
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					t.Errorf("validate was killed by %v (%v): its deferred cleanup did not run", ws.Signal(), err)
				}
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				<-done
				t.Fatal("validate did not exit within a minute of losing its reader or being signalled")
			}
			left, _ := filepath.Glob(filepath.Join(tmp, "corgifs-validate-*"))
			if len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			if b, err := os.ReadFile("/proc/mounts"); err == nil && strings.Contains(string(b), tmp) {
				t.Errorf("a mount under %s is left:\n%s", tmp, b)
			}
		})
	}
}
