//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// daemon is a FUSE server running as a child process. The benchmark never
// reads a mount from the process that serves it.
type daemon struct {
	name    string
	mnt     string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // the exit status, set before done is closed
}

// startDaemon starts argv with its output in logPath and waits until the
// file ready exists, which means the mount is up.
func startDaemon(ctx context.Context, name, mnt, logPath, ready string, argv ...string) (*daemon, error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a ^C to the benchmark does not reach it, and
	// the benchmark stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &daemon{name: name, mnt: mnt, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Minute) // the first corgifs mount indexes the dataset
	for {
		if _, err := os.Stat(ready); err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("%s exited before mounting: %v\n%s", name, d.err, d.logTail())
		case <-timeout:
			d.kill()
			return nil, fmt.Errorf("%s: %s did not appear in 10 minutes\n%s", name, ready, d.logTail())
		case <-ctx.Done():
			d.kill()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM and checks that the daemon unmounts and exits with 0.
func (d *daemon) stop() error {
	select {
	case <-d.done:
		return fmt.Errorf("%s had already exited: %v\n%s", d.name, d.err, d.logTail())
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		d.kill()
		return fmt.Errorf("%s did not exit within a minute of SIGTERM\n%s", d.name, d.logTail())
	}
	if d.err != nil {
		return fmt.Errorf("%s: %v after SIGTERM, want exit status 0\n%s", d.name, d.err, d.logTail())
	}
	if mounted(d.mnt) {
		syscall.Unmount(d.mnt, syscall.MNT_DETACH)
		return fmt.Errorf("%s exited but %s was still mounted", d.name, d.mnt)
	}
	return nil
}

// kill ends the daemon without ceremony and detaches its mount.
func (d *daemon) kill() {
	select {
	case <-d.done:
	default:
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	}
	if mounted(d.mnt) {
		syscall.Unmount(d.mnt, syscall.MNT_DETACH)
	}
}

// logTail returns the end of the daemon's log.
func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// mounted reports whether dir is a mount point: its device differs from its
// parent's. A dead FUSE mount (ENOTCONN) counts as mounted.
func mounted(dir string) bool {
	var st, parent syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return errors.Is(err, syscall.ENOTCONN)
	}
	if err := syscall.Stat(dir+"/..", &parent); err != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// cpuSeconds returns the user plus system CPU time of process pid.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields are
	// counted after its closing parenthesis, starting from field 3 (state).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// peakRSS returns VmHWM, the peak resident set size of process pid, in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// readaheadKB returns the kernel readahead of the file system holding dir.
func readaheadKB(dir string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return "?"
	}
	major, minor := (st.Dev>>8)&0xfff, (st.Dev&0xff)|((st.Dev>>12)&0xfff00)
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major, minor))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
