//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/internal/childmount"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// daemon is a FUSE server running as a child process. The benchmark never
// reads a mount from the process that serves it.
type daemon struct {
	*childmount.Child
	name    string
	mnt     string // the mount point (Child.Dir)
	logPath string
}

// startDaemon starts argv with its output in logPath and waits until the
// file ready exists, which means the mount is up.
func startDaemon(ctx context.Context, name, mnt, logPath, ready string, argv ...string) (*daemon, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d := &daemon{name: name, mnt: mnt, logPath: logPath}
	d.Child, err = childmount.Start(ctx, childmount.Config{
		Argv: argv, Dir: mnt, Ready: ready, Log: logf,
		Timeout: 10 * time.Minute, // the first corgifs mount indexes the dataset
		// Its own process group: a ^C to the benchmark does not reach it,
		// and the benchmark stops it in order.
		OwnGroup: true,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", name, err, d.logTail())
	}
	return d, nil
}

func (d *daemon) pid() int { return d.PID() }

// stop sends SIGTERM and checks that the daemon unmounts and exits with 0
// within a minute.
func (d *daemon) stop() error {
	if err := d.Stop(time.Minute); err != nil {
		return fmt.Errorf("%s: %w\n%s", d.name, err, d.logTail())
	}
	return nil
}

// kill ends the daemon without checks: SIGTERM, then after 10 s SIGKILL;
// whatever it leaves mounted is detached.
func (d *daemon) kill() {
	if !d.Exited() {
		d.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.Done():
		case <-time.After(10 * time.Second):
		}
	}
	d.Kill(10 * time.Second)
}

// logTail returns the end of the daemon's log.
func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
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
