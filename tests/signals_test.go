package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/internal/testenv"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// --- Shutdown whatever the source does ---------------------------------------

// stuckSource serves a copy of a flat source directory over FUSE, from
// memory, in the test process (the corgifs daemon, another process, reads
// it). Once stuck, every read blocks until released and ignores interrupts,
// as a read from a hung hard-mounted NFS server does.
type stuckSource struct {
	dir     string
	srv     *fuse.Server
	mu      sync.Mutex
	gate    chan struct{} // closed while reads may proceed
	blocked chan struct{} // receives once per read that blocks
}

type stuckRoot struct {
	gofs.Inode
	src   *stuckSource
	files map[string][]byte
}

type stuckFile struct {
	gofs.Inode
	src  *stuckSource
	data []byte
}

var stuckMtime = time.Unix(1_700_000_000, 0)

func (r *stuckRoot) OnAdd(ctx context.Context) {
	ino := uint64(2)
	for name, data := range r.files {
		f := &stuckFile{src: r.src, data: data}
		r.AddChild(name, r.NewPersistentInode(ctx, f, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), false)
		ino++
	}
}

func (f *stuckFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = 0o444
	out.Size = uint64(len(f.data))
	out.SetTimes(&stuckMtime, &stuckMtime, &stuckMtime)
	return 0
}

// Open asks for direct I/O so that every read reaches Read, none is served
// from the kernel's page cache filled while indexing.
func (f *stuckFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *stuckFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.src.mu.Lock()
	gate := f.src.gate
	f.src.mu.Unlock()
	select {
	case <-gate:
	default:
		select {
		case f.src.blocked <- struct{}{}:
		default:
		}
		// Only an interrupt ends the wait, and the daemon's reads retry
		// on EINTR: as on a hard NFS mount, the read ends only when the
		// daemon dies. (A read deaf to interrupts would keep even a dying
		// daemon in the kernel, whatever it does.)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
	}
	if off >= int64(len(f.data)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(f.data[off:min(int64(len(f.data)), off+int64(len(dest)))]), 0
}

// serveStuckSource mounts a copy of the files of dir, reads flowing.
func serveStuckSource(t *testing.T, dir string) *stuckSource {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	s := &stuckSource{dir: filepath.Join(t.TempDir(), "stuck-src"), gate: make(chan struct{}), blocked: make(chan struct{}, 1)}
	close(s.gate)
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.srv, err = gofs.Mount(s.dir, &stuckRoot{src: s, files: files}, &gofs.Options{
		MountOptions: fuse.MountOptions{Name: "stucksrc", DirectMount: true, DisableSplice: true},
	})
	if err != nil {
		t.Fatalf("mount the stuck source: %v", err)
	}
	closeFuseOnExec(t)
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(func() {
		s.release()
		if err := s.srv.Unmount(); err != nil {
			exec.Command("umount", "-l", s.dir).Run()
		}
	})
	return s
}

// closeFuseOnExec keeps this process's /dev/fuse descriptors out of the
// daemons it starts: go-fuse opens them without O_CLOEXEC, and a daemon
// holding the connection of the source it reads would wait on itself.
func closeFuseOnExec(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target == "/dev/fuse" {
			fd, _ := strconv.Atoi(e.Name())
			syscall.CloseOnExec(fd)
		}
	}
}

func (s *stuckSource) stick() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *stuckSource) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.gate:
	default:
		close(s.gate)
	}
}

// stickDaemonInSourceRead leaves a handler of m's daemon stuck for good in a
// source read, the way a reader does that gives up on a part (killed by
// the user or a timeout) while the source hangs: the part's file is closed,
// its read is still in the daemon.
func stickDaemonInSourceRead(t *testing.T, m *mount, s *stuckSource) {
	t.Helper()
	cat := readStuckPart(t, m, s)
	cat.Process.Kill()
	exited := make(chan struct{})
	go func() { cat.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Logf("the killed reader has not exited (it waits for the stuck daemon)")
	}
}

// readStuckPart starts a reader of part 0 of 1 and returns it once the
// daemon's read of the source for it has blocked; the reader stays blocked
// in its read(2) until it is killed.
func readStuckPart(t *testing.T, m *mount, s *stuckSource) *exec.Cmd {
	t.Helper()
	s.stick()
	cat := exec.Command("cat", m.part(0, 0, 1))
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.blocked:
	case <-time.After(60 * time.Second):
		cat.Process.Kill()
		t.Fatalf("no read of the source blocked within 60 s of reading a part\n%s", m.log)
	}
	return cat
}

// waitExit waits up to limit for m's daemon to exit; if it does not, it is
// killed and its mount cleared so that the test can end.
func waitExit(t *testing.T, m *mount, limit time.Duration, what string) bool {
	t.Helper()
	select {
	case <-m.done:
		return true
	case <-time.After(limit):
		t.Errorf("daemon still running %v after %s\n%s", limit, what, m.log)
		m.cmd.Process.Kill()
		select {
		case <-m.done:
		case <-time.After(20 * time.Second):
			t.Errorf("daemon %d not gone 20 s after SIGKILL", m.cmd.Process.Pid)
		}
		fsUnmountQuiet(m.dir)
		m.closed = true
		return false
	}
}

// TestSignalWithAHandlerStuckInASourceReadExitsAndFreesMountpoint: a
// handler blocked for good in a source read (a hung NFS server; here a FUSE
// source whose reads never return) must not keep the daemon alive after
// SIGTERM, SIGINT or SIGHUP: it exits 0 within a few seconds (15 s allowed
// here) and nothing is left mounted.
func TestSignalWithAHandlerStuckInASourceReadExitsAndFreesMountpoint(t *testing.T) {
	fuseOK(t)
	data := genSynthetic(t, 4000, 16, 2, 2, "clustered")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			src := serveStuckSource(t, data)
			m := startMount(t, src.dir, smallFlags...)
			stickDaemonInSourceRead(t, m, src)
			m.cmd.Process.Signal(sig)
			if !waitExit(t, m, 15*time.Second, sig.String()+" with a handler stuck in a source read") {
				return
			}
			m.stop() // exit 0, nothing mounted
		})
	}
}

// TestSecondSignalExitsAtOnceWhileUnmountWaits: while the first SIGTERM's
// unmount waits on a reader whose read waits on a source read that never
// returns, a second SIGTERM or SIGINT ends the daemon at once, through the
// second-signal path (not the deadline), and nothing is left mounted. The
// reader stays alive: a read waiting for a block ends when its reader dies
// (the kernel interrupts it), and then nothing would hold the unmount.
func TestSecondSignalExitsAtOnceWhileUnmountWaits(t *testing.T) {
	fuseOK(t)
	data := genSynthetic(t, 4000, 16, 2, 2, "clustered")
	for _, second := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(second.String(), func(t *testing.T) {
			src := serveStuckSource(t, data)
			m := startMount(t, src.dir, smallFlags...)
			cat := readStuckPart(t, m, src)
			defer func() { cat.Process.Kill(); cat.Wait() }()
			m.cmd.Process.Signal(syscall.SIGTERM)
			for deadline := time.Now().Add(15 * time.Second); !strings.Contains(m.log.String(), "signal received, unmounting"); {
				if time.Now().After(deadline) {
					t.Fatalf("no 'signal received' line 15 s after SIGTERM\n%s", m.log)
				}
				time.Sleep(5 * time.Millisecond)
			}
			m.cmd.Process.Signal(second)
			if !waitExit(t, m, 15*time.Second, "a second signal") {
				return
			}
			if !strings.Contains(m.log.String(), "second signal") {
				t.Errorf("the daemon did not exit through the second signal\n%s", m.log)
			}
			m.stop() // exit 0, nothing mounted
		})
	}
}

// TestSignalWhileIndexingAStuckSourceExits: a source read that never
// returns while the index is built must not keep the daemon alive after
// SIGTERM either; nothing is mounted yet, so it exits within a few seconds
// (15 s allowed here) and leaves nothing mounted.
func TestSignalWhileIndexingAStuckSourceExits(t *testing.T) {
	fuseOK(t)
	data := genSynthetic(t, 4000, 16, 2, 2, "clustered")
	src := serveStuckSource(t, data)
	src.stick()
	base := t.TempDir()
	m := &mount{t: t, dir: filepath.Join(base, "mnt"), log: &syncBuffer{}, done: make(chan struct{})}
	if err := os.Mkdir(m.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m.cmd = exec.Command(bin, append([]string{"mount", src.dir, m.dir, "--cache-dir", filepath.Join(base, "cache")}, smallFlags...)...)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exit = m.cmd.Wait(); close(m.done) }()
	t.Cleanup(func() {
		if !m.closed {
			m.cmd.Process.Kill()
			<-m.done
		}
		fsUnmountQuiet(m.dir)
	})
	select {
	case <-src.blocked:
	case <-m.done:
		m.closed = true
		t.Fatalf("the daemon exited before reading the source: %v\n%s", m.exit, m.log)
	case <-time.After(60 * time.Second):
		t.Fatalf("no source read blocked within 60 s of starting the mount\n%s", m.log)
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	if !waitExit(t, m, 15*time.Second, "SIGTERM while indexing a stuck source") {
		return
	}
	m.closed = true
	if mounted(m.dir) {
		t.Errorf("%s mounted after the daemon exited", m.dir)
	}
}

// --- Dead mounts ----------------------------------------------------------------

// TestSighupUnmountsAndExitsZero: closing the terminal of a foreground mount
// sends SIGHUP; the daemon must unmount and exit 0 as for SIGTERM, never
// leave a dead mount ("Transport endpoint is not connected").
func TestSighupUnmountsAndExitsZero(t *testing.T) {
	src := genSynthetic(t, 2000, 8, 2, 1, "clustered")
	m := startMount(t, src, "--seed", "1")
	if n := len(frames(t, m.read(0, 0, 1))); n != 2000 {
		t.Fatalf("served %d records, want 2000", n)
	}
	m.cmd.Process.Signal(syscall.SIGHUP)
	if !waitExit(t, m, 20*time.Second, "SIGHUP") {
		return
	}
	if m.exit != nil {
		t.Errorf("after SIGHUP the daemon exited with %v, want 0\n%s", m.exit, m.log)
	}
	if mounted(m.dir) {
		t.Errorf("%s still mounted after SIGHUP", m.dir)
	}
	m.stop()
}

// TestBrokenLogPipeNeverStopsServing runs the daemon with stdout and stderr
// into a pipe whose reader is gone (`corgifs mount … 2>&1 | head -c1`): log
// writes fail with EPIPE, and the daemon must go on serving every record
// and unmount cleanly on SIGTERM, not die of SIGPIPE.
func TestBrokenLogPipeNeverStopsServing(t *testing.T) {
	fuseOK(t)
	src := genSynthetic(t, 2000, 8, 2, 1, "clustered")
	base := t.TempDir()
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	m := &mount{t: t, dir: dir, log: &syncBuffer{}, done: make(chan struct{})}
	// --debug logs on every request, so that writes keep failing while it serves.
	m.cmd = exec.Command(bin, "mount", src, dir, "--seed", "1", "--debug", "--cache-dir", filepath.Join(base, "cache"))
	m.cmd.Stdout, m.cmd.Stderr = w, w
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() { m.exit = m.cmd.Wait(); close(m.done) }()
	t.Cleanup(func() {
		if !m.closed {
			m.cmd.Process.Kill()
			<-m.done
		}
		fsUnmountQuiet(dir)
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, ".corgifs", "config.json")); err == nil {
			break
		}
		select {
		case <-m.done:
			m.closed = true
			t.Fatalf("with its log pipe broken, the daemon exited before serving: %v", m.exit)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("mount did not come up in time")
		}
	}
	for e := range 3 {
		if n := len(frames(t, m.read(e, 0, 1))); n != 2000 {
			t.Fatalf("epoch %d: served %d records, want 2000", e, n)
		}
	}
	select {
	case <-m.done:
		m.closed = true
		t.Fatalf("the daemon exited while serving: %v", m.exit)
	default:
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	if !waitExit(t, m, 20*time.Second, "SIGTERM") {
		return
	}
	m.closed = true
	if m.exit != nil {
		t.Errorf("daemon exited with %v, want 0", m.exit)
	}
	if mounted(dir) {
		t.Errorf("%s still mounted after SIGTERM", dir)
	}
}

// --- The CLI ----------------------------------------------------------------------

// TestUnmountDetachesOnlyCorgifsMountsUnlessForced: corgifs mounts have the
// type fuse.corgifs; `corgifs unmount` refuses any other mount (here a
// tmpfs) naming its type, detaches it with --force, and refuses a path
// where nothing is mounted.
func TestUnmountDetachesOnlyCorgifsMountsUnlessForced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	src := genSynthetic(t, 500, 4, 2, 1, "clustered")
	m := startMount(t, src, "--seed", "1")
	if typ := mountType(m.dir); typ != "fuse.corgifs" {
		t.Errorf("a corgifs mount has type %q in mountinfo, want fuse.corgifs", typ)
	}

	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		// As root (CI), a tmpfs that cannot be mounted is a missing component.
		testenv.Missing(t, "mount -t tmpfs as root: %v: %s", err, out)
	}
	t.Cleanup(func() { fsUnmountQuiet(dir) })
	_, stderr, code, _ := runTimed(t, 30*time.Second, "unmount", dir)
	if code != 1 || !strings.Contains(stderr, "tmpfs") || !strings.Contains(stderr, "--force") {
		t.Errorf("corgifs unmount of a tmpfs: exit %d, want 1 naming tmpfs and --force:\n%s", code, stderr)
	}
	if !mounted(dir) {
		t.Fatalf("corgifs unmount detached a tmpfs")
	}
	if _, stderr, code, _ := runTimed(t, 30*time.Second, "unmount", "--force", dir); code != 0 || mounted(dir) {
		t.Fatalf("corgifs unmount --force of a tmpfs: exit %d, mounted %v\n%s", code, mounted(dir), stderr)
	}
	if _, stderr, code, _ := runTimed(t, 30*time.Second, "unmount", dir); code != 1 || !strings.Contains(stderr, "not a mount point") {
		t.Errorf("corgifs unmount of a plain directory: exit %d, want 1 saying it is not a mount point:\n%s", code, stderr)
	}

	if _, stderr, code, _ := runTimed(t, 30*time.Second, "unmount", m.dir); code != 0 || mounted(m.dir) {
		t.Fatalf("corgifs unmount of a corgifs mount: exit %d, mounted %v\n%s", code, mounted(m.dir), stderr)
	}
	if !waitExit(t, m, 20*time.Second, "corgifs unmount") {
		return
	}
	m.stop()
}

// mountType is the type of the mount at dir in /proc/self/mountinfo.
func mountType(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	typ := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != dir {
			continue
		}
		for i := 5; i+1 < len(f); i++ {
			if f[i] == "-" {
				typ = f[i+1]
			}
		}
	}
	return typ
}

// TestPartsBeyondWhatNamesResolveAreRefused: part names resolve for K up
// to 2^20, so a larger --parts, whose listed names would all answer ENOENT,
// is refused by mount and order with the limit; 2^20 itself is served.
func TestPartsBeyondWhatNamesResolveAreRefused(t *testing.T) {
	src := genSynthetic(t, 500, 4, 2, 1, "clustered")
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsUnmountQuiet(dir) })
	for _, args := range [][]string{
		{"mount", src, dir, "--parts", "1048577", "--cache-dir", t.TempDir()},
		{"order", src, "--seed", "1", "--parts", "1048577", "--part", "0", "--cache-dir", t.TempDir()},
	} {
		_, stderr, code, _ := runTimed(t, 60*time.Second, args...)
		if code == 0 || !strings.Contains(stderr, "--parts 1048577") || !strings.Contains(stderr, "1048576") {
			t.Errorf("corgifs %s: exit %d, want an error naming the limit 1048576:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
	m := startMount(t, src, "--seed", "1", "--parts", "1048576")
	if _, err := os.Stat(m.part(0, 1048575, 1048576)); err != nil {
		t.Errorf("the last part of --parts 1048576: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.dir, "epoch-0000", "part-00000-of-1048577.tfrecord")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a part of K = 1048577: %v, want ENOENT", err)
	}
}
