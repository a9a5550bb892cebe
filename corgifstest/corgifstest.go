// Package corgifstest mounts corgifs in Go tests.
//
// Mount serves a dataset from a corgifs daemon in a child process, at a
// mount point in t.TempDir(), and returns once the mount serves; the
// daemon is stopped and the mount removed when the test ends, whether it
// passed, failed or panicked. The daemon is never the test process itself:
// a process that reads a FUSE mount it serves can deadlock.
//
//	func TestTraining(t *testing.T) {
//		src := t.TempDir()
//		corgifstest.WriteDataset(t, src, 1000)
//		m := corgifstest.Mount(t, src, corgifstest.Seed(7), corgifstest.Parts(2))
//		for _, rec := range m.Records(0, 0, 2) {
//			// ... rec is one record of part 0 of 2 of epoch 0
//		}
//	}
//
// The daemon is the corgifs binary that Binary finds or builds (once per
// test binary, without the race detector; with RaceDetector, the one that
// RaceBinary builds, with -race when the test binary has it). Tests that
// mount are skipped where /dev/fuse is missing.
package corgifstest

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/childmount"
	"github.com/corgifs/corgifs/internal/testenv"
	"github.com/corgifs/corgifs/shuffler"
)

// An Option sets up a mount.
type Option func(*settings)

type settings struct {
	args     []string
	cacheDir string
	wrapper  []string
	output   io.Writer
	timeout  time.Duration
	grace    time.Duration
	race     bool
}

// Seed sets --seed. Without it the daemon chooses one and logs it.
func Seed(seed uint64) Option { return Args("--seed", strconv.FormatUint(seed, 10)) }

// Parts sets --parts, the parts listed in each epoch directory.
func Parts(k int) Option { return Args("--parts", strconv.Itoa(k)) }

// Epochs sets --epochs, the epoch directories listed.
func Epochs(n int) Option { return Args("--epochs", strconv.Itoa(n)) }

// Buffer sets --buffer: a size ("64MiB") or a percentage of a part ("5%").
func Buffer(b string) Option { return Args("--buffer", b) }

// BlockSize sets --block-size, in bytes.
func BlockSize(n int64) Option { return Args("--block-size", strconv.FormatInt(n, 10)) }

// Strategy sets --strategy ("corgipile", "sequential", ...).
func Strategy(name string) Option { return Args("--strategy", name) }

// MaxMemory sets --max-memory, in bytes.
func MaxMemory(n int64) Option { return Args("--max-memory", strconv.FormatInt(n, 10)) }

// EqualParts sets --equal-parts.
func EqualParts() Option { return Args("--equal-parts") }

// Args adds flags of `corgifs mount` as they are written on its command
// line, after those of the other options (so that they win).
func Args(args ...string) Option {
	return func(s *settings) { s.args = append(s.args, args...) }
}

// CacheDir sets --cache-dir, where the index is kept between mounts. By
// default every Mount has its own, in t.TempDir(): pass the same dir to
// two mounts to test a remount.
func CacheDir(dir string) Option { return func(s *settings) { s.cacheDir = dir } }

// Wrapper runs the daemon under a command, such as
// Wrapper("prlimit", "--nofile=256:256") or Wrapper("taskset", "-c", "0").
// The command must exec the daemon, so that PID and signals reach it.
func Wrapper(argv ...string) Option {
	return func(s *settings) { s.wrapper = slices.Clone(argv) }
}

// RaceDetector runs the daemon that RaceBinary builds: with -race when the
// test binary has it, so that a data race inside the daemon fails the test.
// It is for tests of concurrency through a mount (many readers, signals
// mid-read): a race-detector daemon serves several times slower.
func RaceDetector() Option { return func(s *settings) { s.race = true } }

// Output copies the daemon's output (its log) to w as it comes, for
// example os.Stderr to watch it live. Log returns it either way.
func Output(w io.Writer) Option { return func(s *settings) { s.output = w } }

// ReadyTimeout bounds the wait for the mount to serve (default a minute;
// the first mount of a large dataset indexes it).
func ReadyTimeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// StopTimeout bounds the wait for the daemon to exit after SIGTERM when
// the mount is stopped (default 20 s); past it, the daemon is killed, its
// mount detached and the test fails.
func StopTimeout(d time.Duration) Option { return func(s *settings) { s.grace = d } }

// A Daemon is a corgifs daemon, in a child process, and the mount it serves.
type Daemon struct {
	// Dir is the mount point.
	Dir string

	tb    testing.TB
	child *childmount.Child
	log   childmount.LogBuffer
	grace time.Duration

	mu    sync.Mutex
	ended bool        // Unmount, Kill or the cleanup has run
	cfg   *api.Config // read from config.json on first use
}

// Mount mounts src (a directory, or any source `corgifs mount` takes) at
// a new directory in tb.TempDir() and waits until it serves. The test is
// skipped where /dev/fuse is missing, and fails if the mount does not come
// up. When the test ends, the mount is stopped as Unmount does.
func Mount(tb testing.TB, src string, opts ...Option) *Daemon {
	tb.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(tb, "corgifstest: no /dev/fuse, so no FUSE mount here")
	}
	base := tb.TempDir()
	s := settings{cacheDir: filepath.Join(base, "cache"), timeout: time.Minute, grace: 20 * time.Second}
	for _, o := range opts {
		o(&s)
	}
	find := Binary
	if s.race {
		find = RaceBinary
	}
	bin, err := find()
	if err != nil {
		tb.Fatal(err)
	}
	d := &Daemon{Dir: filepath.Join(base, "mnt"), tb: tb, grace: s.grace}
	argv := append(slices.Clone(s.wrapper), bin, "mount", src, d.Dir, "--cache-dir", s.cacheDir)
	argv = append(argv, s.args...)
	var out io.Writer = &d.log
	if s.output != nil {
		out = io.MultiWriter(&d.log, s.output)
	}
	// The cleanup of tb.TempDir() runs after this package's: the mount is
	// gone before its directory is removed.
	d.child, err = childmount.Start(context.Background(), childmount.Config{Argv: argv, Dir: d.Dir, Log: out, Timeout: s.timeout})
	if err != nil {
		tb.Fatalf("corgifstest: mount %s: %v\n%s", src, err, d.log.String())
	}
	tb.Cleanup(d.cleanup)
	return d
}

// Log returns what the daemon has written so far (its slog lines).
func (d *Daemon) Log() string { return d.log.String() }

// PID returns the process id of the daemon, for /proc/PID/status.
func (d *Daemon) PID() int { return d.child.PID() }

// Process returns the daemon's process, to send it a signal. Do not Wait
// for it: use Done and ExitErr.
func (d *Daemon) Process() *os.Process { return d.child.Cmd.Process }

// Done is closed when the daemon has exited.
func (d *Daemon) Done() <-chan struct{} { return d.child.Done() }

// ExitErr waits for the daemon to exit and returns its exit status (nil
// for 0).
func (d *Daemon) ExitErr() error { return d.child.Err() }

// Unmount stops the daemon now, with SIGTERM, and fails the test unless it
// exits 0 within the stop timeout, leaves nothing mounted and reports no
// data race. A daemon that has already exited is checked the same way.
// Later calls do nothing.
func (d *Daemon) Unmount() {
	d.tb.Helper()
	if !d.end() {
		return
	}
	var err error
	if !d.child.Exited() || d.child.Err() != nil || childmount.Mounted(d.Dir) {
		err = d.child.Stop(d.grace)
	}
	if err != nil {
		d.tb.Errorf("corgifstest: unmount %s: %v\n%s", d.Dir, err, d.Log())
	}
	if strings.Contains(d.Log(), "DATA RACE") {
		d.tb.Errorf("corgifstest: the daemon of %s reported a data race\n%s", d.Dir, d.Log())
	}
}

// Kill ends the daemon at once (SIGKILL) and detaches its mount, without
// checking how it exits: for a test that ended it on purpose, or that
// tests what a crash leaves. Later calls, and Unmount, do nothing.
func (d *Daemon) Kill() {
	d.tb.Helper()
	if !d.end() {
		return
	}
	if err := d.child.Kill(d.grace); err != nil {
		d.tb.Errorf("corgifstest: kill the daemon of %s: %v", d.Dir, err)
	}
}

// end marks the mount ended and reports whether it was not already.
func (d *Daemon) end() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ended {
		return false
	}
	d.ended = true
	return true
}

// cleanup runs when the test ends, however it ends.
func (d *Daemon) cleanup() {
	d.Unmount()
	if !d.child.Exited() {
		d.child.Kill(d.grace)
	}
	if childmount.Mounted(d.Dir) {
		err := childmount.Detach(d.Dir)
		d.tb.Errorf("corgifstest: %s still mounted when the test ended (detached: %v)", d.Dir, err)
	}
}

// config reads config.json once. Mounts that do not say their format
// serve TFRecord.
func (d *Daemon) config() *api.Config {
	d.tb.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg != nil {
		return d.cfg
	}
	b, err := os.ReadFile(api.ConfigPath(d.Dir))
	if err != nil {
		d.tb.Fatalf("corgifstest: %v\n%s", err, d.Log())
	}
	var c api.Config
	if err := json.Unmarshal(b, &c); err != nil {
		d.tb.Fatalf("corgifstest: %s/.corgifs/config.json: %v", d.Dir, err)
	}
	c.Format = cmp.Or(c.Format, "tfrecord")
	c.Extension = cmp.Or(c.Extension, ".tfrecord")
	d.cfg = &c
	return d.cfg
}

// Part returns the path of part i of k of epoch e. Any k resolves, not
// only the --parts one.
func (d *Daemon) Part(epoch, i, k int) string {
	d.tb.Helper()
	return shuffler.PartPath(d.Dir, epoch, i, k, d.config().Extension)
}

// ReadPart returns the bytes of part i of k of epoch e, failing the test
// on a read error.
func (d *Daemon) ReadPart(epoch, i, k int) []byte {
	d.tb.Helper()
	b, err := os.ReadFile(d.Part(epoch, i, k))
	if err != nil {
		d.tb.Fatalf("corgifstest: read epoch %d part %d of %d: %v\n%s", epoch, i, k, err, d.Log())
	}
	return b
}

// Records returns the records of part i of k of epoch e in the order
// served, read with the streaming reader of the mount's format; each is a
// record as the part holds it (a whole TFRecord frame, a line with its
// line end, a whole tar sample), as WriteDataset returns them. The test
// fails on a read error or a malformed part.
func (d *Daemon) Records(epoch, i, k int) [][]byte {
	d.tb.Helper()
	c := d.config()
	o := formats.Options{RecordSize: c.RecordSize}
	if c.Header != nil {
		o.NoHeader = !*c.Header
	}
	if c.HeaderBytes != nil {
		o.HeaderBytes = *c.HeaderBytes
	}
	f, err := formats.Lookup(c.Format, o)
	if err != nil {
		d.tb.Fatalf("corgifstest: %v", err)
	}
	name := d.Part(epoch, i, k)
	file, err := os.Open(name)
	if err != nil {
		d.tb.Fatalf("corgifstest: %v\n%s", err, d.Log())
	}
	defer file.Close()
	recs, err := readRecords(f, bufio.NewReaderSize(file, 1<<20))
	if err != nil {
		d.tb.Fatalf("corgifstest: %s: %v\n%s", name, err, d.Log())
	}
	return recs
}

// readRecords copies every record of a file of format f.
func readRecords(f formats.Format, r io.Reader) ([][]byte, error) {
	return formats.ReadAll(f.NewReader(r))
}
