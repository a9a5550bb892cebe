package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/internal/childmount"
	"github.com/corgifs/corgifs/internal/testenv"
)

// daemonPid finds in the stderr of `corgifs mount --background` the pid of
// the daemon it started.
func daemonPid(t *testing.T, stderr string) int {
	t.Helper()
	m := regexp.MustCompile(`daemon pid (\d+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no daemon pid in the output of mount --background:\n%s", stderr)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// alive reports whether pid runs (a zombie waiting for a reaper does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// sessionOf returns the session id of pid, from /proc/PID/stat
// (proc(5): state, ppid, pgrp, session follow the command name).
func sessionOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 4 {
		return -1
	}
	sid, _ := strconv.Atoi(f[3])
	return sid
}

// stopDaemon ends a detached daemon with SIGTERM, checks that it exits and
// leaves nothing mounted at mnt.
func stopDaemon(t *testing.T, pid int, mnt, logPath string) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		exec.Command("umount", "-l", mnt).Run()
		log, _ := os.ReadFile(logPath)
		t.Errorf("daemon %d did not exit within 20s of SIGTERM\n%s", pid, log)
	}
	if mounted(mnt) {
		exec.Command("umount", "-l", mnt).Run()
		t.Errorf("%s still mounted after the daemon exited", mnt)
	}
}

// runCmd runs bin with args (and extra environment) and returns stdout,
// stderr and the exit code.
func runCmd(env []string, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return out.String(), errb.String(), code
}

func TestBackgroundMountReturnsOnlyOnceItServes(t *testing.T) {
	fuseOK(t)
	src := genSynthetic(t, 20000, 8, 2, 4, "clustered")
	base := t.TempDir()
	mnt, logPath := filepath.Join(base, "mnt"), filepath.Join(base, "mount.log")
	os.Mkdir(mnt, 0o755)
	// A fresh cache: the daemon indexes before it mounts, and the caller
	// must not see the mount point before that is done.
	stdout, stderr, code := runCmd(nil, "mount", "--background", src, mnt, "--cache-dir", filepath.Join(base, "cache"),
		"--seed", "7", "--parts", "2", "--log-file", logPath)
	if code != 0 {
		t.Fatalf("mount --background: exit %d\n%s", code, stderr)
	}
	pid := daemonPid(t, stderr)
	t.Cleanup(func() { stopDaemon(t, pid, mnt, logPath) })
	// No polling: the part must be there the moment the command returns.
	var records int
	for i := range 2 {
		b, err := os.ReadFile(filepath.Join(mnt, "epoch-0000", fmt.Sprintf("part-%05d-of-00002.tfrecord", i)))
		if err != nil {
			t.Fatalf("right after mount --background returned: %v", err)
		}
		records += len(frames(t, b))
	}
	if records != 20000 {
		t.Errorf("epoch 0 holds %d records, want 20000", records)
	}
	want := fmt.Sprintf("corgifs: mounted %s at %s (20000 records, 2 parts, seed 7)\n", src, mnt)
	if stdout != want {
		t.Errorf("stdout of mount --background = %q, want %q", stdout, want)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "index ready") {
		t.Errorf("--log-file %s does not hold the daemon's log:\n%s", logPath, log)
	}
	if !alive(pid) {
		t.Fatalf("daemon %d is not running after mount --background returned", pid)
	}
	// Detached: its own session, stdin /dev/null.
	if sid := sessionOf(pid); sid != pid {
		t.Errorf("daemon session id %d, want its own (%d)", sid, pid)
	}
	if in, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", pid)); in != "/dev/null" {
		t.Errorf("daemon stdin is %q, want /dev/null", in)
	}
}

func TestBackgroundMountFailureExitsNonZeroWithTheDaemonsError(t *testing.T) {
	fuseOK(t)
	src := genSynthetic(t, 2000, 8, 2, 1, "clustered")
	base := t.TempDir()
	mnt := filepath.Join(base, "mnt")
	os.Mkdir(mnt, 0o755)
	// The budget is checked after indexing, in the daemon.
	_, stderr, code := runCmd(nil, "mount", "--background", src, mnt, "--cache-dir", filepath.Join(base, "cache"),
		"--block-size", "64KiB", "--max-memory", "1KiB", "--log-file", filepath.Join(base, "log"))
	if code == 0 {
		t.Fatalf("mount --background with a failing daemon exited 0\n%s", stderr)
	}
	if !strings.Contains(stderr, "smaller than the largest block") {
		t.Errorf("the caller does not show the daemon's error:\n%s", stderr)
	}
	if mounted(mnt) {
		exec.Command("umount", "-l", mnt).Run()
		t.Errorf("%s mounted although mount --background failed", mnt)
	}
	if m := regexp.MustCompile(`daemon pid (\d+)`).FindStringSubmatch(stderr); m != nil {
		pid, _ := strconv.Atoi(m[1])
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("daemon %d still runs after it failed", pid)
		}
	}
}

func TestForegroundMountPrintsOneReadyLineOnStdout(t *testing.T) {
	fuseOK(t)
	src := genSynthetic(t, 3000, 8, 2, 2, "clustered")
	base := t.TempDir()
	mnt := filepath.Join(base, "mnt")
	os.Mkdir(mnt, 0o755)
	cmd := exec.Command(bin, "mount", src, mnt, "--cache-dir", filepath.Join(base, "cache"), "--seed", "3", "--parts", "4")
	var stderr childmount.LogBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		for l := range lines {
			t.Errorf("more on stdout after the ready line: %q", l)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("daemon exited with %v\n%s", err, stderr.String())
		}
	}()
	select {
	case l := <-lines:
		want := fmt.Sprintf("corgifs: mounted %s at %s (3000 records, 4 parts, seed 3)", src, mnt)
		if l != want {
			t.Errorf("ready line %q, want %q", l, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no ready line within 60s\n%s", stderr.String())
	}
	// The line comes once the mount serves.
	if _, err := os.Stat(filepath.Join(mnt, "epoch-0000", "part-00003-of-00004.tfrecord")); err != nil {
		t.Errorf("after the ready line: %v", err)
	}
}

// notifySocket listens where a service manager would for sd_notify
// messages and returns the socket path and the messages as they come.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	msgs := make(chan string, 16)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := conn.Read(b)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(b[:n])
		}
	}()
	return path, msgs
}

func TestMountTellsSystemdItIsReadyAndStopping(t *testing.T) {
	fuseOK(t)
	src := genSynthetic(t, 3000, 8, 2, 2, "clustered")
	sock, msgs := notifySocket(t)
	m := startMountUnder(t, []string{"env", "NOTIFY_SOCKET=" + sock}, src, "--seed", "1")
	select {
	case msg := <-msgs:
		if !strings.Contains(msg, "READY=1") {
			t.Errorf("first sd_notify message %q, want READY=1", msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no READY=1 on $NOTIFY_SOCKET\n%s", m.log)
	}
	m.stop()
	select {
	case msg := <-msgs:
		if !strings.Contains(msg, "STOPPING=1") {
			t.Errorf("sd_notify message at SIGTERM %q, want STOPPING=1", msg)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("no STOPPING=1 on $NOTIFY_SOCKET after SIGTERM")
	}

	// With --background the caller, which systemd started, says READY=1
	// with the daemon as the main process.
	base := t.TempDir()
	mnt, logPath := filepath.Join(base, "mnt"), filepath.Join(base, "log")
	os.Mkdir(mnt, 0o755)
	_, stderr, code := runCmd([]string{"NOTIFY_SOCKET=" + sock}, "mount", "--background", src, mnt,
		"--cache-dir", filepath.Join(base, "cache"), "--log-file", logPath)
	if code != 0 {
		t.Fatalf("mount --background: exit %d\n%s", code, stderr)
	}
	pid := daemonPid(t, stderr)
	defer stopDaemon(t, pid, mnt, logPath)
	select {
	case msg := <-msgs:
		if !strings.Contains(msg, "READY=1") || !strings.Contains(msg, fmt.Sprintf("MAINPID=%d", pid)) {
			t.Errorf("sd_notify of mount --background %q, want READY=1 and MAINPID=%d", msg, pid)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("mount --background returned without READY=1 on $NOTIFY_SOCKET")
	}
}

// installHelper links /sbin/mount.fuse.corgifs to the binary under test
// for the duration of the test: util-linux's mount(8) looks for helpers
// only in /sbin, /sbin/fs.d and /sbin/fs, not in $PATH. An existing helper
// that is not a link into a temporary directory (a real installation) is
// left alone and the test fails rather than replace it.
func installHelper(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mount -t fuse.corgifs with a helper in /sbin needs root")
	}
	testenv.LockMachine(t) // the Debian package test installs the same helper
	const link = "/sbin/mount.fuse.corgifs"
	if old, err := os.Readlink(link); err == nil && strings.HasPrefix(old, os.TempDir()) {
		os.Remove(link) // left by a test binary that was killed
	}
	if _, err := os.Lstat(link); err == nil {
		t.Fatalf("%s exists: this test would replace an installed helper", link)
	}
	if out, err := exec.Command(bin, "install-helper", "--dir", "/sbin").CombinedOutput(); err != nil {
		t.Fatalf("corgifs install-helper: %v\n%s", err, out)
	}
	t.Cleanup(func() { os.Remove(link) })
	if old, _ := os.Readlink(link); old != bin {
		t.Fatalf("%s links to %q, want %s", link, old, bin)
	}
}

func TestMountTypeFuseCorgifsAndAnFstabLineServeWithTheirOptions(t *testing.T) {
	fuseOK(t)
	if _, err := exec.LookPath("mount"); err != nil {
		testenv.Missing(t, "no mount(8) (util-linux)")
	}
	installHelper(t)
	src := genSynthetic(t, 6000, 8, 2, 4, "clustered")
	base := t.TempDir()
	check := func(name, mnt, logPath string, seed, parts int) {
		t.Helper()
		var cfg api.Config
		b, err := os.ReadFile(api.ConfigPath(mnt))
		if err != nil {
			t.Fatalf("%s: right after mount returned: %v", name, err)
		}
		json.Unmarshal(b, &cfg)
		if cfg.Seed != uint64(seed) || cfg.Parts != parts || cfg.Buffer != "10%" || cfg.MaxMemory != 256<<20 {
			t.Errorf("%s: config seed %d, %d parts, buffer %s, max memory %d; want seed %d, %d parts, buffer 10%%, max memory 256 MiB", name, cfg.Seed, cfg.Parts, cfg.Buffer, cfg.MaxMemory, seed, parts)
		}
		var records int
		for i := range parts {
			b, err := os.ReadFile(filepath.Join(mnt, "epoch-0000", fmt.Sprintf("part-%05d-of-%05d.tfrecord", i, parts)))
			if err != nil {
				t.Fatal(err)
			}
			records += len(frames(t, b))
		}
		if records != 6000 {
			t.Errorf("%s: epoch 0 holds %d records, want 6000", name, records)
		}
		// umount(8), as a user or systemd would: the daemon sees it and exits.
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("%s: umount: %v\n%s", name, err, out)
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if log, _ := os.ReadFile(logPath); strings.Contains(string(log), "unmounted from outside") {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		log, _ := os.ReadFile(logPath)
		t.Errorf("%s: the daemon did not notice umount:\n%s", name, log)
	}

	// mount -t with -o, options written with underscores and dashes.
	mnt, logPath := filepath.Join(base, "m1"), filepath.Join(base, "m1.log")
	os.Mkdir(mnt, 0o755)
	out, err := exec.Command("mount", "-t", "fuse.corgifs", src, mnt, "-o",
		"seed=7,parts=3,buffer=10%,max_memory=256MiB,cache-dir="+filepath.Join(base, "cache")+",log_file="+logPath).CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t fuse.corgifs: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	check("mount -t", mnt, logPath, 7, 3)

	// An fstab line, with the generic options a real one carries, mounted
	// by its mount point alone (mount -T reads this file instead of
	// /etc/fstab).
	mnt, logPath = filepath.Join(base, "m2"), filepath.Join(base, "m2.log")
	os.Mkdir(mnt, 0o755)
	fstab := filepath.Join(base, "fstab")
	line := fmt.Sprintf("%s %s fuse.corgifs defaults,noauto,nofail,_netdev,x-systemd.automount,seed=9,parts=2,buffer=10%%,max-memory=256MiB,cache_dir=%s,log_file=%s 0 0\n",
		src, mnt, filepath.Join(base, "cache"), logPath)
	os.WriteFile(fstab, []byte(line), 0o644)
	if out, err := exec.Command("mount", "-T", fstab, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -T fstab %s: %v\n%s\nline: %s", mnt, err, out, line)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	check("fstab", mnt, logPath, 9, 2)

	// A flag corgifs does not have fails the mount and names it.
	mnt = filepath.Join(base, "m3")
	os.Mkdir(mnt, 0o755)
	out, err = exec.Command("mount", "-t", "fuse.corgifs", src, mnt, "-o", "sede=7").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "sede") {
		t.Errorf("mount -o sede=7: err %v, output does not name the option:\n%s", err, out)
	}
	if mounted(mnt) {
		exec.Command("umount", "-l", mnt).Run()
		t.Errorf("mounted with an unknown option")
	}
}

// TestSystemdExamplesVerify runs systemd-analyze verify on the sample
// units, with corgifs pointing at the binary under test (verify checks
// that ExecStart is executable).
func TestSystemdExamplesVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed; CI must verify the sample units (apt-get install systemd)")
		}
		t.Skip("no systemd-analyze")
	}
	units, _ := filepath.Glob("../examples/systemd/*")
	if len(units) < 2 {
		t.Fatalf("sample units: %v, want a service and a mount unit", units)
	}
	dir := t.TempDir()
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(u, ".service") {
			for _, want := range []string{"Type=notify", "ExecStart=/usr/local/bin/corgifs mount ", "KillSignal=SIGTERM", "ExecStopPost="} {
				if !strings.Contains(string(b), want) {
					t.Errorf("%s lacks %q", u, want)
				}
			}
			if strings.Contains(string(b), "--background") {
				t.Errorf("%s: Type=notify wants the foreground mount", u)
			}
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/corgifs"), []byte(bin))
		p := filepath.Join(dir, filepath.Base(u))
		os.WriteFile(p, b, 0o644)
		out, err := exec.Command(analyze, "verify", p).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
}

func TestStatsOnAPipePrintsJSONLinesWhoseCountersGrowWhileReading(t *testing.T) {
	src := genSynthetic(t, 20000, 16, 2, 4, "clustered")
	m := startMount(t, src, "--seed", "1", "--parts", "2", "--block-size", "16KiB")
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for e := 0; ; e++ {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.Open(m.part(e, e%2, 2))
			if err != nil {
				return
			}
			io.Copy(io.Discard, f)
			f.Close()
		}
	}()
	stdout, stderr, code := runCmd(nil, "stats", "--interval", "250ms", "--count", "8", m.dir)
	close(stop)
	<-readerDone
	if code != 0 {
		t.Fatalf("corgifs stats: exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 8 {
		t.Fatalf("stats --count 8 printed %d lines:\n%s", len(lines), stdout)
	}
	var served []int64
	var maxRate float64
	for _, l := range lines {
		var s struct {
			Interval   float64 `json:"interval_s"`
			ServedMBps float64 `json:"served_mb_s"`
			HitRate    float64 `json:"hit_rate"`
			Counters   struct {
				BytesServed  int64 `json:"bytes_served"`
				MemoryBudget int64 `json:"memory_budget"`
			} `json:"counters"`
		}
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("stats line %q: %v", l, err)
		}
		if s.Interval <= 0 || s.HitRate < 0 || s.HitRate > 1 || s.Counters.MemoryBudget <= 0 {
			t.Errorf("stats line out of range: %s", l)
		}
		served = append(served, s.Counters.BytesServed)
		maxRate = max(maxRate, s.ServedMBps)
	}
	for i := 1; i < len(served); i++ {
		if served[i] < served[i-1] {
			t.Errorf("bytes_served went down: %v", served)
		}
	}
	if served[len(served)-1] <= served[0] || maxRate <= 0 {
		t.Errorf("counters did not grow while a reader read: bytes_served %v, max served_mb_s %v", served, maxRate)
	}

	_, stderr, code = runCmd(nil, "stats", "--count", "1", t.TempDir())
	if code == 0 || !strings.Contains(stderr, "not a live corgifs mount") {
		t.Errorf("stats of a plain directory: exit %d, %q", code, stderr)
	}
}

func TestVersionOnEveryCommand(t *testing.T) {
	want, _, code := run("version")
	if code != 0 || !strings.HasPrefix(want, "corgifs ") || !strings.Contains(want, "go1.") {
		t.Fatalf("corgifs version: exit %d, %q", code, want)
	}
	for _, args := range [][]string{{"--version"}, {"-version"}} {
		if out, _, code := run(args...); code != 0 || out != want {
			t.Errorf("corgifs %s: exit %d, %q, want %q", args[0], code, out, want)
		}
	}
	for _, c := range []string{"mount", "unmount", "index", "order", "gen", "validate", "demo", "tune", "stats", "install-helper", "mount-helper"} {
		out, stderr, code := run(c, "--version")
		if code != 0 || out != want {
			t.Errorf("corgifs %s --version: exit %d, %q (stderr %q), want %q", c, code, out, stderr, want)
		}
	}
	_, stderr, _ := run("mount", "--help")
	for _, f := range []string{"-version", "-background", "-log-file"} {
		if !strings.Contains(stderr, f) {
			t.Errorf("mount --help does not list %s", f)
		}
	}
}

func TestMountOverALiveCorgifsMountSaysSo(t *testing.T) {
	src := genSynthetic(t, 1000, 4, 2, 1, "clustered")
	m := startMount(t, src, "--seed", "1")
	for _, extra := range [][]string{nil, {"--nonempty"}} {
		args := append([]string{"mount", src, m.dir, "--cache-dir", t.TempDir()}, extra...)
		// Before the fix, --nonempty stacked a second mount and served it:
		// a bound and SIGTERM end that one cleanly.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 20 * time.Second
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		cmd.Run()
		stderr, code := errb.String(), cmd.ProcessState.ExitCode()
		if ctx.Err() != nil {
			code = 0 // it mounted
		}
		cancel()
		if code == 0 || !strings.Contains(stderr, "already a live corgifs mount") || strings.Contains(stderr, "not empty") {
			t.Errorf("mount over a live corgifs mount %v: exit %d, %q", extra, code, stderr)
		}
	}
}

func TestUnmountOfAnUnmountedDirectorySaysNothingIsMounted(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := run("unmount", dir)
	if code == 0 || !strings.Contains(stderr, "nothing is mounted at "+dir) {
		t.Errorf("unmount of a plain directory: exit %d, %q", code, stderr)
	}
}

// TestBusyUnmountWarningIsOneLine holds a part open while the daemon is
// stopped, with a fusermount3 that answers as the real one does for a busy
// mount (go-fuse falls back to it when umount2 fails): the warning must
// not carry its "\n (code exit status 1)\n".
func TestBusyUnmountWarningIsOneLine(t *testing.T) {
	src := genSynthetic(t, 2000, 4, 2, 1, "clustered")
	fake := t.TempDir()
	script := "#!/bin/sh\necho \"fusermount3: failed to unmount $2: Device or resource busy\" >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(fake, "fusermount3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m := startMountUnder(t, []string{"env", "PATH=" + fake + ":" + os.Getenv("PATH")}, src, "--seed", "1")
	f, err := os.Open(m.part(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m.stop()
	var warning string
	for _, l := range strings.Split(m.log.String(), "\n") {
		if strings.Contains(l, "mount busy") {
			warning = l
		}
	}
	if warning == "" {
		t.Fatalf("no busy-unmount warning in the log:\n%s", m.log)
	}
	if strings.Contains(warning, `\n`) || strings.Contains(warning, "(code") {
		t.Errorf("busy-unmount warning is not one clean line: %s", warning)
	}
}

func TestOrderHelpSaysTheSeedIsRequired(t *testing.T) {
	_, stderr, _ := run("order", "--help")
	i := strings.Index(stderr, "-seed")
	if i < 0 {
		t.Fatalf("order --help has no -seed:\n%s", stderr)
	}
	usage := stderr[i:]
	if j := strings.Index(usage[1:], "\n  -"); j >= 0 {
		usage = usage[:j+1]
	}
	if !strings.Contains(usage, "required") || strings.Contains(usage, "chosen at random") {
		t.Errorf("order --help on -seed: %q, want it required and not chosen at random", usage)
	}
	_, stderr, code := run("order", t.TempDir())
	if code == 0 || !strings.Contains(stderr, "--seed is required") {
		t.Errorf("order without --seed: exit %d, %q", code, stderr)
	}
}

// TestInterruptingABackgroundMountBeforeItIsReadyStopsTheDaemon presses
// Ctrl-C on mount --background while the daemon indexes a source whose
// reads hang: the daemon, in a session of its own, would not see the
// terminal's SIGINT, so the waiting caller must stop it.
func TestInterruptingABackgroundMountBeforeItIsReadyStopsTheDaemon(t *testing.T) {
	fuseOK(t)
	data := genSynthetic(t, 4000, 16, 2, 2, "clustered")
	src := serveStuckSource(t, data)
	src.stick()
	base := t.TempDir()
	mnt := filepath.Join(base, "mnt")
	os.Mkdir(mnt, 0o755)
	var stderr childmount.LogBuffer
	cmd := exec.Command(bin, append([]string{"mount", "--background", src.dir, mnt, "--cache-dir", filepath.Join(base, "cache"),
		"--log-file", filepath.Join(base, "log")}, smallFlags...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-src.blocked:
	case err := <-done:
		t.Fatalf("mount --background ended before the daemon read the source: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("no source read blocked within 60 s\n%s", stderr.String())
	}
	// The caller prints the daemon's pid after starting it, and the
	// daemon may reach the stuck read first.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "daemon pid ") && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	pid := daemonPid(t, stderr.String())
	t.Cleanup(func() {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if mounted(mnt) {
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(stderr.String(), "before the mount was ready") {
			t.Errorf("interrupted mount --background: %v, stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("mount --background did not return within 30 s of SIGINT\n%s", stderr.String())
	}
	if alive(pid) {
		t.Errorf("daemon %d still runs after the interrupted mount --background returned", pid)
	}
	if mounted(mnt) {
		t.Errorf("%s mounted after an interrupted mount --background", mnt)
	}
}
