package tests

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/corgifs/corgifs/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSourceFileReplacedByANamedPipeGivesEIOAndTheRestServes replaces one
// of four indexed files by a named pipe with no writer. With strategy none
// and four parts, part i holds file i. Reading the part of the pipe must
// end promptly with EIO (opening the pipe used to wait for a writer
// forever, and SIGTERM could not stop the daemon); the other parts must
// serve their files' bytes; the daemon must log which file is not a
// regular file, and stop on SIGTERM (checked when the mount is stopped).
func TestSourceFileReplacedByANamedPipeGivesEIOAndTheRestServes(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	var data [][]byte
	for i := range 4 {
		b := records(fmt.Sprintf("file%d", i), 200, 1000)
		writeFile(t, filepath.Join(src, fmt.Sprintf("f%d.tfrecord", i)), b)
		data = append(data, b)
	}
	m := startMount(t, src, "--strategy", "none", "--parts", "4", "--block-size", "64KiB", "--buffer", "256KiB", "--seed", "1")
	pipe := filepath.Join(src, "f2.tfrecord")
	if err := os.Remove(pipe); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	got := make([][]byte, 4)
	errs := make([]error, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() { got[i], errs[i] = readUntilErr(m.part(0, i, 4)) })
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("reads did not end within 60s of the named pipe\n%s", m.log)
	}
	for i := range 4 {
		if i == 2 {
			if !errors.Is(errs[i], syscall.EIO) {
				t.Errorf("part of the named pipe: %v, want EIO", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("part %d: %v\n%s", i, errs[i], m.log)
		}
		if !bytes.Equal(got[i], data[i]) {
			t.Errorf("part %d: %d bytes, not the %d bytes of its file", i, len(got[i]), len(data[i]))
		}
	}
	if log, ok := m.logHas("not a regular file", pipe); !ok {
		t.Errorf("the log does not name %s as not a regular file:\n%s", pipe, log)
	}
}

// TestManySmallFilesUnderALowOpenFileLimitServeEveryRecordOnce serves 3,000
// one-record files to 16 concurrent readers (parts of 16, --buffer 100%,
// so each load spans about 190 files) from a daemon whose open-file limit
// is 256. Loads used to open every file of a buffer at once and failed
// with "too many open files"; now every record must be served exactly once,
// without an error.
func TestManySmallFilesUnderALowOpenFileLimitServeEveryRecordOnce(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		testenv.Missing(t, "no prlimit")
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	const n, k = 3000, 16
	for i := range n {
		writeFile(t, filepath.Join(src, fmt.Sprintf("f%05d.tfrecord", i)), records(fmt.Sprint("r", i), 1, 100))
	}
	m := startMountUnder(t, []string{prlimit, "--nofile=256:256"}, src,
		"--seed", "5", "--parts", fmt.Sprint(k), "--buffer", "100%", "--block-size", "64KiB")
	parts := make([][]byte, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { parts[i], errs[i] = readUntilErr(m.part(0, i, k)) })
	}
	wg.Wait()
	var got [][32]byte
	for i := range k {
		if errs[i] != nil {
			t.Fatalf("part %d of %d: %v\n%s", i, k, errs[i], m.log)
		}
		got = append(got, hashes(frames(t, parts[i]))...)
	}
	if want := sortedHashes(sourceRecords(t, src)); !slices.Equal(sortedHashes(got), want) {
		t.Fatalf("%d records served, want the %d source records once each", len(got), len(want))
	}
	if log := m.log.String(); strings.Contains(log, "too many open files") || strings.Contains(log, "load failed") {
		t.Errorf("the daemon logged load failures:\n%s", log)
	}
}

// TestSuggestedMaxMemoryServesARecordOfSeveralMiBReadDirectly mounts a
// source whose largest block is a record of 5 MiB that starts in the middle
// of a page, read with O_DIRECT (blocks of 1 MiB or more): its slab takes
// whole pages, more than its bytes. A --max-memory below it must fail at
// start naming the smallest workable value, and that value must serve
// every record (it used to name the block's bytes, with which every read
// of the part failed: "a buffer of ... bytes does not fit").
func TestSuggestedMaxMemoryServesARecordOfSeveralMiBReadDirectly(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(records("s", 10, 1000), records("big", 1, 5<<20+7), records("t", 10, 1000)))
	flags := []string{"--block-size", "1MiB", "--seed", "4", "--cache-dir", t.TempDir()}
	mnt := t.TempDir()
	t.Cleanup(func() { fsUnmountQuiet(mnt) })
	_, stderr, code, _ := runTimed(t, 30*time.Second, append([]string{"mount", src, mnt, "--max-memory", "1MiB"}, flags...)...)
	match := regexp.MustCompile(`smaller than the largest block.*use at least --max-memory (\d+)`).FindStringSubmatch(stderr)
	if code != 1 || match == nil {
		t.Fatalf("exit %d, want a failure naming the smallest --max-memory:\n%s", code, stderr)
	}
	m := startMount(t, src, append(flags, "--max-memory", match[1])...)
	got, err := readUntilErr(m.part(0, 0, 1))
	if err != nil {
		t.Fatalf("with the named --max-memory %s: %v\n%s", match[1], err, m.log)
	}
	if want := sortedHashes(sourceRecords(t, src)); !slices.Equal(sortedHashes(hashes(frames(t, got))), want) {
		t.Fatalf("with the named --max-memory, the part does not hold the %d source records once each", len(want))
	}
}

// TestConcurrentReadersUnderAShortBudgetTakeTurnsWithoutRereading has 8
// readers read the 8 parts of an epoch at once, each part one buffer of
// about 4 MiB (--buffer 100%), with a budget of 9 MiB: two buffers. Readers
// must take turns for memory rather than evict the buffers others are in:
// each byte served must be read from the source less than twice (they
// used to evict each other's buffers and read each byte about 6 times),
// and every part must hold the bytes it holds with plenty of memory.
func TestConcurrentReadersUnderAShortBudgetTakeTurnsWithoutRereading(t *testing.T) {
	src := genSynthetic(t, 8000, 1024, 4, 4, "clustered")
	const k = 8
	flags := []string{"--parts", fmt.Sprint(k), "--buffer", "100%", "--block-size", "256KiB", "--seed", "1"}
	ref := startMount(t, src, flags...)
	m := startMount(t, src, append(flags, "--max-memory", "9MiB")...)
	got := make([][]byte, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { got[i], errs[i] = readUntilErr(m.part(0, i, k)) })
	}
	wg.Wait()
	s := m.stats()
	for i := range k {
		if errs[i] != nil {
			t.Fatalf("part %d: %v\n%s", i, errs[i], m.log)
		}
		if !bytes.Equal(got[i], ref.read(0, i, k)) {
			t.Errorf("part %d under a short budget differs from the same part with plenty of memory", i)
		}
	}
	if s.BytesServed == 0 || s.MemoryWaits == 0 {
		t.Fatalf("stats %+v: nothing served, or no reader waited for memory (the test proves nothing)", s)
	}
	if r := float64(s.BytesRead) / float64(s.BytesServed); r >= 2 {
		t.Errorf("read %d bytes from the source for %d served: %.2f per byte, want under 2", s.BytesRead, s.BytesServed, r)
	} else {
		t.Logf("read %.2f bytes from the source per byte served (%+v)", r, s)
	}
}
