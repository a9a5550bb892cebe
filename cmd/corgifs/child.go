package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/shuffler"
)

// childMount is a `corgifs mount` run as a child process. Commands that
// read a mount serve it from another process: reading a FUSE mount from the
// process that serves it can deadlock.
type childMount struct {
	dir  string
	ext  string // of the part files, from the mount's config.json
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// startChildMount mounts src at a new directory under work with the given
// mount flags and waits until it serves.
func startChildMount(src, work string, flags ...string) (*childMount, error) {
	mnt, err := os.MkdirTemp(work, "mnt-")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(mnt + ".log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"mount", src, mnt}, flags...)...)
	cmd.Stdout, cmd.Stderr = log, log
	// If the parent dies (Ctrl-C, a closed pipe), the daemon unmounts too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	m := &childMount{dir: mnt, cmd: cmd, log: log, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	deadline := time.After(5 * time.Minute) // indexing a large source takes time
	for {
		if cfg, err := os.ReadFile(filepath.Join(mnt, ".corgifs", "config.json")); err == nil {
			var c struct{ Extension string }
			if err := json.Unmarshal(cfg, &c); err != nil || c.Extension == "" {
				m.stop()
				return nil, fmt.Errorf("%s: .corgifs/config.json says no part extension: %v", mnt, err)
			}
			m.ext = c.Extension
			return m, nil
		}
		select {
		case err := <-m.done:
			log.Close()
			out, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("corgifs mount exited (%v):\n%s", err, out)
		case <-deadline:
			m.stop()
			return nil, fmt.Errorf("%s was not mounted after 5 minutes", mnt)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// part returns the path of part i of k of epoch e.
func (m *childMount) part(e, i, k int) string {
	return filepath.Join(m.dir, fmt.Sprintf("epoch-%04d", e), shuffler.PartName(i, k, m.ext))
}

// stop unmounts and waits for the daemon to exit.
func (m *childMount) stop() error {
	defer m.log.Close()
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.done:
		return err
	case <-time.After(10 * time.Second):
		m.cmd.Process.Kill()
		return fmt.Errorf("corgifs mount did not exit within 10s of SIGTERM")
	}
}
