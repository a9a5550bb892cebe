// Package tests holds the end-to-end tests of corgifs: each one builds the
// real binary, mounts real FUSE file systems in temporary directories from a
// child process (reading a mount from the process that serves it can
// deadlock) and reads them the way a user would.
//
// Parallel tests: the long tests that share nothing with the others and
// check counts, bytes and accuracy rather than times (training through a
// mount, the Python suite, every format) call t.Parallel, so that after the
// sequential tests they run two at a time (-parallel is GOMAXPROCS) and one
// test's waits overlap another's work. A test that calls t.Setenv, changes
// the machine (/sbin, /etc) or measures time or CPU must stay sequential.
package tests

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/corgifstest"
	"github.com/corgifs/corgifs/internal/childmount"
	"github.com/corgifs/corgifs/internal/testenv"
	"github.com/corgifs/corgifs/shuffler"
)

// bin is the corgifs binary the mounts run: corgifstest's, built once by
// TestMain, without the race detector (the tests in raceTests run
// binFor's race-detector build instead).
var bin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if bin, err = corgifstest.Binary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if gens, err = newGenCache(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer gens.remove()
	return m.Run()
}

// fuseOK skips a test where FUSE cannot be mounted.
func fuseOK(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "no /dev/fuse")
	}
}

// corgifs runs the binary to completion and returns its stdout.
// A gen into a new directory is made once per set of arguments (genCache).
func corgifs(t *testing.T, args ...string) string {
	t.Helper()
	if cacheable(args) {
		return gens.gen(t, args)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("corgifs %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// genSynthetic writes a synthetic dataset and returns its directory.
func genSynthetic(t *testing.T, records, features, classes, files int, order string, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	corgifs(t, append([]string{"gen", "synthetic", dir, "--records", fmt.Sprint(records), "--features", fmt.Sprint(features),
		"--classes", fmt.Sprint(classes), "--files", fmt.Sprint(files), "--order", order, "--seed", "3"}, extra...)...)
	return dir
}

// mount is a running corgifs daemon: a corgifstest.Daemon seen through the
// fields the tests use. Tests that start the daemon themselves (to give it
// a broken log pipe, a mount point of their own, or to watch it before it
// serves) fill in cmd, log, done and exit and leave d nil.
type mount struct {
	t      *testing.T
	dir    string
	cmd    *exec.Cmd // for startMount, only Process is set: signal it, never Wait
	log    *syncBuffer
	done   chan struct{} // closed once exit is set
	exit   error
	closed bool       // set by a test that ended the daemon itself: stop does nothing
	ext    string     // of the part files, from config.json (set by startMount, or by part)
	extMu  sync.Mutex // guards ext where part sets it
	d      *corgifstest.Daemon
}

type syncBuffer = childmount.LogBuffer

// startMount mounts src in a new temporary directory with the given extra
// flags and waits until it serves. The mount is stopped at the end of the test.
func startMount(t *testing.T, src string, flags ...string) *mount {
	t.Helper()
	return startMountUnder(t, nil, src, flags...)
}

// startMountUnder is startMount with the daemon run by a command prefix,
// such as prlimit with its options.
func startMountUnder(t *testing.T, prefix []string, src string, flags ...string) *mount {
	t.Helper()
	fuseOK(t)
	m := &mount{t: t, log: &syncBuffer{}, done: make(chan struct{})}
	opts := []corgifstest.Option{corgifstest.Output(m.log), corgifstest.Args(flags...)}
	if prefix != nil {
		opts = append(opts, corgifstest.Wrapper(prefix...))
	}
	if daemonRace(t) {
		opts = append(opts, corgifstest.RaceDetector())
	}
	m.d = corgifstest.Mount(t, src, opts...)
	m.dir = m.d.Dir
	m.ext = filepath.Ext(m.d.Part(0, 0, 1))
	m.cmd = &exec.Cmd{Path: binFor(t), Process: m.d.Process()}
	go func() {
		<-m.d.Done()
		m.exit = m.d.ExitErr()
		close(m.done)
	}()
	// Registered after corgifstest's cleanup, so run before it: a test
	// that set closed has ended the daemon itself.
	t.Cleanup(m.stop)
	return m
}

// stop sends SIGTERM and checks that the daemon exits 0, without a data
// race report, and leaves no mount behind.
func (m *mount) stop() {
	if m.d != nil {
		if m.closed {
			m.d.Kill() // no checks: detach what is left
		} else {
			m.d.Unmount()
		}
		m.closed = true
		return
	}
	if m.closed {
		return
	}
	m.closed = true
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		m.cmd.Process.Kill()
		<-m.done
		childmount.Detach(m.dir)
		m.t.Errorf("daemon did not exit within 20s of SIGTERM\n%s", m.log)
		return
	}
	if m.exit != nil {
		m.t.Errorf("daemon exited with %v\n%s", m.exit, m.log)
	}
	if strings.Contains(m.log.String(), "DATA RACE") {
		m.t.Errorf("daemon reported a data race\n%s", m.log)
	}
	if mounted(m.dir) {
		childmount.Detach(m.dir)
		m.t.Errorf("%s still mounted after the daemon exited", m.dir)
	}
}

// mounted reports whether dir is a mount point (a dead one included).
func mounted(dir string) bool { return childmount.Mounted(dir) }

// part returns the path of part i of k of epoch. It is safe for
// concurrent use.
func (m *mount) part(epoch, i, k int) string {
	if m.d != nil {
		return m.d.Part(epoch, i, k)
	}
	m.extMu.Lock()
	if m.ext == "" {
		b, _ := os.ReadFile(api.ConfigPath(m.dir))
		var cfg api.Config
		json.Unmarshal(b, &cfg)
		m.ext = cmp.Or(cfg.Extension, ".tfrecord")
	}
	ext := m.ext
	m.extMu.Unlock()
	return shuffler.PartPath(m.dir, epoch, i, k, ext)
}

func (m *mount) read(epoch, i, k int) []byte {
	m.t.Helper()
	b, err := os.ReadFile(m.part(epoch, i, k))
	if err != nil {
		m.t.Fatalf("read epoch %d part %d/%d: %v\n%s", epoch, i, k, err, m.log)
	}
	return b
}

// frames splits a served file into its records, checking both CRCs of
// each with an independent reader: the framing is parsed here, not by the
// formats package under test.
func frames(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var recs [][]byte
	for off := 0; off < len(b); {
		if len(b)-off < 16 {
			t.Fatalf("truncated frame at offset %d", off)
		}
		n := int(uint64(b[off]) | uint64(b[off+1])<<8 | uint64(b[off+2])<<16 | uint64(b[off+3])<<24 |
			uint64(b[off+4])<<32 | uint64(b[off+5])<<40 | uint64(b[off+6])<<48 | uint64(b[off+7])<<56)
		if n < 0 || n > len(b)-off-16 {
			t.Fatalf("frame at offset %d claims %d bytes, %d left", off, n, len(b)-off-16)
		}
		if maskedCRC32C(b[off:off+8]) != le32(b[off+8:]) {
			t.Fatalf("length CRC mismatch at offset %d", off)
		}
		data := b[off+12 : off+12+n]
		if maskedCRC32C(data) != le32(b[off+12+n:]) {
			t.Fatalf("data CRC mismatch at offset %d", off)
		}
		recs = append(recs, data)
		off += n + 16
	}
	return recs
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// maskedCRC32C is written out from the TFRecord spec, so that it checks
// the formats package rather than repeating it: CRC-32C from its reflected
// polynomial, a byte at a time through crc32cTable, then the mask.
func maskedCRC32C(b []byte) uint32 {
	crc := crc32c(b)
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8
}

func crc32c(b []byte) uint32 {
	crc := ^uint32(0)
	for _, c := range b {
		crc = crc32cTable[byte(crc)^c] ^ crc>>8
	}
	return ^crc
}

// TestTheTestsCRC32CGivesTheCheckValueOfRFC3720 checks the tests' own
// CRC against the check value of CRC-32C ("123456789").
func TestTheTestsCRC32CGivesTheCheckValueOfRFC3720(t *testing.T) {
	if got := crc32c([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("crc32c(\"123456789\") = %#x, want 0xe3069283", got)
	}
}

// crc32cTable holds the CRC of each byte, bit by bit from the polynomial
// 0x82f63b78: with it the tests' CRC takes one step a byte, not eight (the
// tests check megabytes under the race detector).
var crc32cTable = func() (t [256]uint32) {
	for i := range t {
		crc := uint32(i)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x82f63b78
			} else {
				crc >>= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// sourceRecords returns the payload hashes of every record under src.
func sourceRecords(t *testing.T, src string) [][32]byte {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	var hs [][32]byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range frames(t, b) {
			hs = append(hs, sha256.Sum256(r))
		}
	}
	return hs
}

func hashes(recs [][]byte) [][32]byte {
	hs := make([][32]byte, len(recs))
	for i, r := range recs {
		hs[i] = sha256.Sum256(r)
	}
	return hs
}

func sortedHashes(hs [][32]byte) [][32]byte {
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	return hs
}

// orderFrame is one line of `corgifs order` output with the frame it names.
type orderFrame struct {
	line  string // as printed: file offset length
	file  string
	frame []byte // the whole TFRecord frame, read from the source file
}

func (o orderFrame) payload() []byte { return o.frame[12 : len(o.frame)-4] }

// orderFrames reads from the files under src the frames that out, the
// output of `corgifs order`, names, in order.
func orderFrames(t *testing.T, src, out string) []orderFrame {
	t.Helper()
	files := map[string][]byte{}
	var frames []orderFrame
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("order line %q: want 'file offset length'", l)
		}
		if files[f[0]] == nil {
			b, err := os.ReadFile(filepath.Join(src, f[0]))
			if err != nil {
				t.Fatal(err)
			}
			files[f[0]] = b
		}
		off, err1 := strconv.Atoi(f[1])
		n, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || off < 0 || n < 16 || off+n > len(files[f[0]]) {
			t.Fatalf("order line %q does not name a frame of %s", l, f[0])
		}
		frames = append(frames, orderFrame{line: l, file: f[0], frame: files[f[0]][off : off+n]})
	}
	return frames
}

// waitLog waits up to d for the daemon's log to match re: a reader's EIO
// can reach the test before the line that explains it has crossed the
// log pipe.
func (m *mount) waitLog(re *regexp.Regexp, d time.Duration) bool {
	for deadline := time.Now().Add(d); !re.MatchString(m.log.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
