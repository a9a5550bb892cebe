package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/api"
)

// The child of `mount --background` finds its end of the readiness pipe in
// readyFDEnv and, when it has no --log-file and no journal, logs to syslog
// when logEnv says so.
const (
	readyFDEnv = "CORGIFS_READY_FD"
	logEnv     = "CORGIFS_LOG"
)

// What the child writes on the readiness pipe before it closes it: the
// ready line, or the error that ended the mount before it was ready.
const (
	readyMsg = 'R'
	errorMsg = 'E'
)

// sysFlags make `corgifs mount` behave like the mount of a system service.
type sysFlags struct {
	background bool
	logFile    string
}

func (s *sysFlags) register(fset *flag.FlagSet) {
	fset.BoolVar(&s.background, "background", false, "return once the mount serves, leaving the daemon running detached (its own session,\nstdin /dev/null); a failure before that is printed and exits non-zero")
	fset.StringVar(&s.logFile, "log-file", "", "append the daemon's log to `file`. Default: stderr in the foreground; with --background,\n"+
		"the systemd journal when stderr is one, else syslog when /dev/log exists, else\n"+
		"CACHE-DIR/logs/MNT.log (the path is printed)")
}

// start runs before anything is indexed. With --background, in the
// calling process, it starts the daemon, waits until it is ready or has
// failed, and returns true: the caller returns err. Otherwise it points
// *stderr at --log-file, if given, and the caller goes on serving.
func (s *sysFlags) start(rd *readiness, args []string, cacheDir, mnt string, stdout io.Writer, stderr *io.Writer) (bool, error) {
	if rd.daemon {
		return false, nil // started by daemonize, which chose where it logs
	}
	if s.background {
		return true, s.daemonize(args, cacheDir, mnt, stdout, *stderr)
	}
	if s.logFile != "" {
		f, err := openLog(s.logFile)
		if err != nil {
			return false, err
		}
		*stderr = f // for the life of the process
	}
	return false, nil
}

func openLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("--log-file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("--log-file: %w", err)
	}
	return f, nil
}

// daemonize re-executes this binary with the same arguments as a detached
// child that serves the mount, and returns when the child says it is ready
// (nil) or has failed (its error). The child tells which on a pipe, so that
// a caller such as mount(8), a script or a systemd Type=forking unit can
// use MNT as soon as this returns.
func (s *sysFlags) daemonize(args []string, cacheDir, mnt string, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--background: find this program to start the daemon: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("--background: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(self, append([]string{"mount"}, args...)...)
	cmd.Env = append(withoutEnv(os.Environ(), "NOTIFY_SOCKET", readyFDEnv, logEnv), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{w} // fd 3 in the child
	// Stdin stays nil: /dev/null. A session of its own: the terminal's
	// Ctrl-C and hangup no longer reach the daemon once it is ready.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	where, logf, err := s.logTarget(cacheDir, mnt, stderr)
	if err != nil {
		w.Close()
		return err
	}
	switch {
	case logf != nil:
		cmd.Stdout, cmd.Stderr = logf, logf
		defer logf.Close()
	case where == "syslog":
		cmd.Env = append(cmd.Env, logEnv+"=syslog")
	default: // the journal: the stream systemd gave this process
		cmd.Stdout, cmd.Stderr = stderr, stderr
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("--background: start the daemon: %w", err)
	}
	w.Close() // the child holds the only write end: EOF when it exits
	if logf != nil {
		fmt.Fprintf(stderr, "corgifs: daemon pid %d logs to %s\n", cmd.Process.Pid, where)
	}

	// Until the mount is ready, interrupting this process stops the
	// daemon too: a Ctrl-C during a long indexing must not leave it
	// running unseen.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, shutdownSignals...)
	defer signal.Stop(sigs)
	msg := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		msg <- b
	}()
	var b []byte
	select {
	case b = <-msg:
	case sig := <-sigs:
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-msg:
		case <-time.After(2 * unmountWait):
			cmd.Process.Kill()
		}
		cmd.Wait()
		return fmt.Errorf("%v before the mount was ready: the daemon was stopped, nothing is mounted", sig)
	}
	switch {
	case len(b) > 0 && b[0] == readyMsg:
		line := strings.TrimSpace(string(b[1:]))
		fmt.Fprintln(stdout, line)
		// The daemon is the service now: a Type=notify unit that runs
		// mount --background hands its main PID over.
		if err := sdNotify(fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=%s", cmd.Process.Pid, line)); err != nil {
			fmt.Fprintf(stderr, "corgifs: %s\n", flagText(err))
		}
		cmd.Process.Release()
		return nil
	case len(b) > 0 && b[0] == errorMsg:
		cmd.Wait()
		return errors.New(strings.TrimSpace(string(b[1:])))
	}
	err = cmd.Wait()
	return fmt.Errorf("the daemon exited (%v) before the mount was ready; its log is in %s", err, where)
}

// logTarget chooses where the daemon logs: --log-file; else the journal
// when stderr is the journal stream systemd set up ($JOURNAL_STREAM names
// its device and inode); else syslog when /dev/log exists; else a file in
// the cache directory. Inheriting any other stderr is never right: a pipe
// (`corgifs mount --background | tee`, a subprocess with captured output)
// would never see EOF while the daemon runs.
func (s *sysFlags) logTarget(cacheDir, mnt string, stderr io.Writer) (string, *os.File, error) {
	path := s.logFile
	if path == "" {
		if isJournal(stderr) {
			return "the systemd journal", nil, nil
		}
		if _, err := os.Stat("/dev/log"); err == nil {
			return "syslog", nil, nil
		}
		if cacheDir == "" {
			return "", nil, errors.New("--background: no --log-file, no syslog (/dev/log) and no --cache-dir to keep a log in: pass --log-file")
		}
		abs, err := filepath.Abs(mnt)
		if err != nil {
			return "", nil, err
		}
		name := strings.ReplaceAll(strings.Trim(abs, "/"), "/", "-")
		if name == "" {
			name = "root"
		}
		path = filepath.Join(cacheDir, "logs", name+".log")
	}
	f, err := openLog(path)
	if err != nil {
		return "", nil, err
	}
	return path, f, nil
}

// isJournal reports whether w is the stream systemd connected to the
// journal for this service (systemd.exec(5), $JOURNAL_STREAM).
func isJournal(w io.Writer) bool {
	f, ok := w.(*os.File)
	env := os.Getenv("JOURNAL_STREAM")
	if !ok || env == "" {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return env == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// readiness tells whoever waits for the mount that it serves: the parent
// of `mount --background` through the pipe, systemd through
// $NOTIFY_SOCKET, a person at a terminal with one line on stdout.
type readiness struct {
	pipe   *os.File // in the daemon of --background until it is ready or failed
	daemon bool     // this process is the daemon of --background
	done   bool
}

// readinessFromEnv returns the readiness of this process, taking the pipe
// out of the environment so that nothing started later inherits it.
func readinessFromEnv() *readiness {
	r := &readiness{}
	if v := os.Getenv(readyFDEnv); v != "" {
		os.Unsetenv(readyFDEnv)
		r.daemon = true
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			r.pipe = os.NewFile(uintptr(fd), "readiness pipe")
		}
	}
	return r
}

// logWriter is where the daemon of --background logs when it was told to
// use syslog; w otherwise.
func (r *readiness) logWriter(w io.Writer) io.Writer {
	if os.Getenv(logEnv) != "syslog" {
		return w
	}
	os.Unsetenv(logEnv)
	sl, err := syslog.New(syslog.LOG_INFO|syslog.LOG_DAEMON, "corgifs")
	if err != nil {
		return w
	}
	return sl
}

// ready says that mnt serves once it answers a lookup. In the daemon of
// --background the line goes to the waiting parent (and the log);
// otherwise it is printed on stdout.
func (r *readiness) ready(stdout, stderr io.Writer, mnt, line string) {
	if r.done {
		return
	}
	r.done = true
	answered := make(chan error, 1)
	go func() {
		_, err := os.Stat(api.ConfigPath(mnt))
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			fmt.Fprintf(stderr, "corgifs: the new mount does not answer: %s\n", flagText(err))
		}
	case <-time.After(10 * time.Second):
		fmt.Fprintf(stderr, "corgifs: the new mount did not answer a lookup within 10s\n")
	}
	if r.pipe != nil {
		fmt.Fprintln(stderr, line)
		r.pipe.Write(append([]byte{readyMsg}, line+"\n"...))
		r.pipe.Close()
		r.pipe = nil
	} else {
		fmt.Fprintln(stdout, line)
	}
	if err := sdNotify("READY=1\nSTATUS=" + line); err != nil {
		fmt.Fprintf(stderr, "corgifs: %s\n", flagText(err))
	}
}

// stopping tells systemd that the mount is going away.
func (r *readiness) stopping() {
	sdNotify("STOPPING=1")
}

// fail hands err to the waiting parent when the mount ends before it was
// ready.
func (r *readiness) fail(err error) {
	if r.pipe == nil || r.done {
		return
	}
	if err == nil {
		err = errors.New("the daemon ended before the mount was ready")
	}
	var b bytes.Buffer
	b.WriteByte(errorMsg)
	b.WriteString(err.Error())
	r.pipe.Write(b.Bytes())
	r.pipe.Close()
	r.pipe = nil
}

// runMount serves a mount, telling whoever waits when it is ready or why
// it failed.
func runMount(args []string, stdout, stderr io.Writer) error {
	rd := readinessFromEnv()
	if w := rd.logWriter(stderr); w != stderr {
		stdout, stderr = w, w
	}
	err := serveMount(args, stdout, stderr, rd)
	rd.fail(err)
	return err
}
