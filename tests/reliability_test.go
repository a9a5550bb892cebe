package tests

// Reliability and security (issue 5): faults injected into real mounts.
// RELIABILITY.md lists every fault tried here, what corgifs does, and the
// test that shows it.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
	"github.com/corgifs/corgifs/internal/testenv"
)

// readUntilErr reads path from start to end in reads of 64 KiB and returns
// what it got before the first error (nil at the end of the file).
func readUntilErr(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// frame returns one TFRecord frame whose length field says n and whose
// payload is data (n may lie); both CRCs are valid.
func frame(n uint64, data []byte) []byte {
	var h [8]byte
	binary.LittleEndian.PutUint64(h[:], n)
	b := binary.LittleEndian.AppendUint32(h[:], maskedCRC32C(h[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, maskedCRC32C(data))
}

// records returns n valid frames with payloads of size bytes, tagged with tag.
func records(tag string, n, size int) []byte {
	var b []byte
	for i := range n {
		p := bytes.Repeat([]byte{byte(i)}, size)
		copy(p, fmt.Sprintf("%s-%d", tag, i))
		b = append(b, frame(uint64(len(p)), p)...)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runTimed runs the binary with a time limit and returns stdout, stderr, the
// exit code and the child's peak resident size in KiB.
func runTimed(t *testing.T, limit time.Duration, args ...string) (string, string, int, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	// A race-detector build otherwise sleeps a second at exit.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	peak, err := launched(cmd)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("corgifs %s did not finish within %v\n%s", strings.Join(args, " "), limit, errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code, peak()
}

// orderedPart is the expected content of one part, assembled from the
// source bytes by `corgifs order`, with the source files it reads.
type orderedPart struct {
	data  []byte
	files map[string]bool
}

func orderPart(t *testing.T, src string, flags []string, e, i, k int) orderedPart {
	t.Helper()
	out := corgifs(t, append([]string{"order", src, "--epoch", fmt.Sprint(e), "--part", fmt.Sprint(i), "--parts", fmt.Sprint(k)}, flags...)...)
	p := orderedPart{files: map[string]bool{}}
	for _, o := range orderFrames(t, src, out) {
		p.data = append(p.data, o.frame...)
		p.files[o.file] = true
	}
	return p
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(to, e.Name()), b)
	}
}

// --- 1. Source bytes changed after indexing --------------------------------

// TestSourceChangedAfterIndexingGivesEIONeverWrongBytes changes one source
// file of a running mount in five ways. Each file is one block, so the
// changed file is in exactly one part of each epoch: that part must fail
// with EIO after serving only correct bytes, the log must name the file,
// the offset and the failed check, stats.json must count it, the other
// parts must serve exactly their bytes, and a remount must rebuild the
// index and say why.
func TestSourceChangedAfterIndexingGivesEIONeverWrongBytes(t *testing.T) {
	fuseOK(t)
	master := genSynthetic(t, 1600, 8, 2, 8, "shuffled")
	flags := []string{"--block-size", "1MiB", "--buffer", "4KiB", "--seed", "5"}
	const k, epochs = 4, 2
	orderCache := t.TempDir()
	var want [epochs][k]orderedPart
	for e := range epochs {
		for i := range k {
			want[e][i] = orderPart(t, master, append(flags, "--cache-dir", orderCache), e, i, k)
		}
	}
	names, _ := filepath.Glob(filepath.Join(master, "*.tfrecord"))
	victim := filepath.Base(names[3])
	orig, _ := os.ReadFile(names[3])
	// The record holding the middle byte of the file: its frame offset is
	// what the log must name for a flipped byte.
	var flipAt, flipFrame int
	for off := 0; off < len(orig); {
		n := int(binary.LittleEndian.Uint64(orig[off:]))
		if off+n+16 > len(orig)/2 {
			flipAt, flipFrame = off+12+n/2, off
			break
		}
		off += n + 16
	}
	other, _ := os.ReadFile(names[0])

	cases := []struct {
		name   string
		change func(t *testing.T, path string)
		// what the daemon must log
		check *regexp.Regexp
		// what the remount logs as the reason, and whether the rebuilt index
		// still holds damage (then the remount fails without --skip-corrupt)
		reason  string
		damaged bool
	}{
		{"flipped byte, same size and mtime", func(t *testing.T, path string) {
			fi, _ := os.Stat(path)
			b := slices.Clone(orig)
			b[flipAt] ^= 0x5a
			writeFile(t, path, b)
			// Bit rot keeps the modification time: only the CRC can tell.
			os.Chtimes(path, fi.ModTime(), fi.ModTime())
		}, regexp.MustCompile(fmt.Sprintf(`%s: corrupt record at offset %d: data CRC mismatch`, regexp.QuoteMeta(victim), flipFrame)),
			"a block failed its check while served", true},
		{"truncated tail", func(t *testing.T, path string) {
			if err := os.Truncate(path, int64(len(orig)-7)); err != nil {
				t.Fatal(err)
			}
		}, regexp.MustCompile(regexp.QuoteMeta(victim) + ` at offset 0: file changed since indexing \(size \d+, was \d+`),
			"changed size", true},
		{"replaced by a shorter file", func(t *testing.T, path string) {
			tmp := path + ".new"
			writeFile(t, tmp, orig[:len(orig)/2+recordBoundary(orig, len(orig)/2)])
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, regexp.MustCompile(regexp.QuoteMeta(victim) + ` at offset 0: file changed since indexing \(size \d+, was \d+`),
			"changed size", false},
		{"replaced by a longer file", func(t *testing.T, path string) {
			tmp := path + ".new"
			writeFile(t, tmp, append(slices.Clone(orig), other...))
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, regexp.MustCompile(regexp.QuoteMeta(victim) + ` at offset 0: file changed since indexing \(size \d+, was \d+`),
			"changed size", false},
		{"deleted", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, regexp.MustCompile(regexp.QuoteMeta(victim) + ` at offset 0: .*no such file or directory`),
			"was removed", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			src := filepath.Join(t.TempDir(), "src")
			copyDir(t, master, src)
			cache := t.TempDir()
			mflags := append(slices.Clone(flags), "--parts", fmt.Sprint(k), "--cache-dir", cache)
			m := startMount(t, src, mflags...)
			c.change(t, filepath.Join(src, victim))
			failed := 0
			for e := range epochs {
				for i := range k {
					got, err := readUntilErr(m.part(e, i, k))
					w := want[e][i]
					if w.files[victim] {
						failed++
						if !errors.Is(err, syscall.EIO) {
							t.Errorf("epoch %d part %d reads the changed file: got error %v, want EIO", e, i, err)
						}
						if !bytes.HasPrefix(w.data, got) || len(got) >= len(w.data) {
							t.Errorf("epoch %d part %d: the %d bytes served before the error are not the start of the part", e, i, len(got))
						}
						continue
					}
					if err != nil || !bytes.Equal(got, w.data) {
						t.Errorf("epoch %d part %d does not read the changed file but failed or differs: %v (%d of %d bytes)", e, i, err, len(got), len(w.data))
					}
				}
			}
			if failed != epochs {
				t.Fatalf("the changed file is in %d parts over %d epochs, want one per epoch", failed, epochs)
			}
			if s := m.stats(); s.LoadErrors == 0 {
				t.Errorf("stats.json counts no load_errors")
			}
			if !m.waitLog(c.check, 10*time.Second) {
				t.Errorf("log does not name the file, offset and check (%s):\n%s", c.check, m.log)
			}
			// The daemon keeps serving after the errors.
			if _, err := os.ReadFile(api.StatsPath(m.dir)); err != nil {
				t.Fatal(err)
			}
			m.stop()

			// A remount rebuilds the index and says why.
			if c.damaged {
				// The damage is now found at indexing, named, and refused.
				mnt := t.TempDir()
				t.Cleanup(func() { fsUnmountQuiet(mnt) })
				_, stderr, code, _ := runTimed(t, time.Minute, append([]string{"mount", src, mnt}, mflags...)...)
				if !strings.Contains(stderr, "rebuilding index") || !strings.Contains(stderr, c.reason) {
					t.Errorf("remount does not say why it rebuilds the index (want %q):\n%s", c.reason, stderr)
				}
				if code != 1 || !strings.Contains(stderr, victim) || !strings.Contains(stderr, "--skip-corrupt") {
					t.Fatalf("remount of a damaged file: exit %d\n%s", code, stderr)
				}
				m2 := startMount(t, src, append(mflags, "--skip-corrupt")...)
				var n int
				for i := range k {
					n += len(frames(t, m2.read(0, i, k)))
				}
				if n != 1599 {
					t.Errorf("with --skip-corrupt the remount serves %d records, want 1599", n)
				}
				return
			}
			m2 := startMount(t, src, mflags...)
			if log, ok := m2.logHas("rebuilding index", c.reason, victim); !ok {
				t.Errorf("remount does not say why it rebuilds the index (want %q and the file):\n%s", c.reason, log)
			}
			wantAll := sortedHashes(sourceRecords(t, src))
			var got [][32]byte
			for i := range k {
				got = append(got, hashes(frames(t, m2.read(1, i, k)))...)
			}
			if !slices.Equal(sortedHashes(got), wantAll) {
				t.Errorf("after the remount, epoch 1 serves %d records, want each of the %d source records once", len(got), len(wantAll))
			}
		})
	}
}

// fsUnmountQuiet detaches dir if something is mounted there.
func fsUnmountQuiet(dir string) {
	if mounted(dir) {
		exec.Command("umount", "-l", dir).Run()
	}
}

// recordBoundary returns how far past n the next frame boundary of b is.
func recordBoundary(b []byte, n int) int {
	for off := 0; off < len(b); {
		if off >= n {
			return off - n
		}
		off += int(binary.LittleEndian.Uint64(b[off:])) + 16
	}
	return len(b) - n
}

// --- 2. Hostile or odd input at indexing ------------------------------------

// TestHostileInputAtIndexingGivesClearErrorsWithoutHugeAllocations indexes
// one odd source at a time. Each either indexes with a documented handling
// or fails with an error naming the file, the offset and what is wrong;
// none panics, hangs or allocates what a length field claims (the peak
// resident size of the indexer stays small even for a length of 2^63).
func TestHostileInputAtIndexingGivesClearErrorsWithoutHugeAllocations(t *testing.T) {
	good := records("good", 10, 100)
	cases := []struct {
		name    string
		make    func(t *testing.T, src string)
		flags   []string
		records int      // on success
		errs    []string // on failure: all must appear; nil means success
	}{
		{"empty file beside a good one", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), good)
			writeFile(t, filepath.Join(src, "empty.tfrecord"), nil)
		}, nil, 10, nil},
		{"only an empty file", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "empty.tfrecord"), nil)
		}, nil, 0, nil},
		{"zero-length records", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(frame(0, nil), good, frame(0, nil)))
		}, nil, 12, nil},
		{"length field past the end of the file", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(good, frame(1000, []byte("short"))))
		}, nil, 0, []string{"a.tfrecord", fmt.Sprintf("corrupt record at offset %d: length field 1000 runs past the end", len(good))}},
		{"length field of 2^63", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(good, frame(1<<63, []byte("tiny"))))
		}, nil, 0, []string{"a.tfrecord", fmt.Sprintf("corrupt record at offset %d: length field 9223372036854775808 runs past the end", len(good))}},
		{"length field of 2^63 skipped", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(good, frame(1<<63, []byte("tiny")), good))
		}, []string{"--skip-corrupt"}, 20, nil},
		{"1-byte file", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), []byte{7})
		}, nil, 0, []string{"a.tfrecord", "corrupt record at offset 0: truncated frame: 1 bytes left"}},
		{"text file matching the glob", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "notes.tfrecord"), []byte("these are not the records you are looking for\n"))
		}, nil, 0, []string{"notes.tfrecord", "corrupt record at offset 0: length CRC mismatch", "--skip-corrupt"}},
		{"FIFO matching the glob is not opened", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), good)
			if err := syscall.Mkfifo(filepath.Join(src, "fifo.tfrecord"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, nil, 10, nil},
		{"directory named *.tfrecord is walked into", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "d.tfrecord", "inner.tfrecord"), good)
		}, nil, 10, nil},
		{"symlink loops are not followed", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), good)
			os.Symlink(".", filepath.Join(src, "loop"))
			os.Symlink("self.tfrecord", filepath.Join(src, "self.tfrecord"))
		}, nil, 10, nil},
		{"symlink loops with --follow-symlinks are listed once", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.tfrecord"), good)
			os.Symlink("..", filepath.Join(src, "sub", "up"))
			os.Symlink(".", filepath.Join(src, "loop"))
			os.Symlink("self.tfrecord", filepath.Join(src, "self.tfrecord"))
		}, []string{"--follow-symlinks"}, 10, nil},
		{"no matching files", func(t *testing.T, src string) {
			writeFile(t, filepath.Join(src, "a.dat"), good) // *.txt would be read as lines
		}, nil, 0, []string{"no files matching", "--include"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			os.MkdirAll(filepath.Join(src, "sub"), 0o755)
			c.make(t, src)
			out, stderr, code, rss := runTimed(t, 30*time.Second, append([]string{"index", src, "--cache-dir", t.TempDir()}, c.flags...)...)
			if strings.Contains(stderr, "panic") {
				t.Fatalf("indexer panicked:\n%s", stderr)
			}
			if rss > 256<<10 {
				t.Errorf("indexer peaked at %d KiB resident", rss)
			}
			if c.errs == nil {
				if code != 0 || !strings.Contains(out, fmt.Sprintf("records     %d\n", c.records)) {
					t.Fatalf("exit %d, want %d records:\n%s%s", code, c.records, out, stderr)
				}
				return
			}
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s%s", code, out, stderr)
			}
			for _, w := range c.errs {
				if !strings.Contains(stderr, w) {
					t.Errorf("error does not say %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestOddButValidInputIsServed mounts what indexes with a documented
// handling: empty files serve nothing, zero-length records are served as
// they are, and an empty dataset mounts with empty parts.
func TestOddButValidInputIsServed(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	good := records("good", 10, 100)
	writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(frame(0, nil), good, frame(0, nil)))
	writeFile(t, filepath.Join(src, "empty.tfrecord"), nil)
	m := startMount(t, src, "--seed", "1", "--parts", "2")
	want := sortedHashes(sourceRecords(t, src))
	var got [][32]byte
	for i := range 2 {
		got = append(got, hashes(frames(t, m.read(0, i, 2)))...)
	}
	if !slices.Equal(sortedHashes(got), want) || len(want) != 12 {
		t.Fatalf("served %d records, want the 12 source records (2 empty) once each", len(got))
	}

	empty := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(empty, "empty.tfrecord"), nil)
	m = startMount(t, empty, "--seed", "1")
	if b := m.read(0, 0, 1); len(b) != 0 {
		t.Fatalf("an empty dataset serves %d bytes", len(b))
	}
}

// TestUnreadableSourceFileFailsWithPermissionDenied runs the indexer as an
// unprivileged user (the tests run as root, for whom file modes do not
// deny anything) on a source with a file it may not read.
func TestUnreadableSourceFileFailsWithPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user")
	}
	base, err := os.MkdirTemp("", "corgifs-perm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	src := filepath.Join(base, "src")
	writeFile(t, filepath.Join(src, "a.tfrecord"), records("a", 5, 50))
	writeFile(t, filepath.Join(src, "secret.tfrecord"), records("s", 5, 50))
	os.Chmod(filepath.Join(src, "secret.tfrecord"), 0o000)
	// The unprivileged user must be able to run the binary.
	os.Chmod(filepath.Dir(bin), 0o755)
	cmd := exec.Command(bin, "index", src, "--cache-dir", filepath.Join(base, "cache"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = base
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "secret.tfrecord: permission denied") {
		t.Fatalf("index of an unreadable file as uid 65534: %v\n%s", err, errb.String())
	}
}

// TestTenThousandSmallFilesIndexAndServeEveryRecordOnce indexes a source of
// 10,000 one-record files and reads it through a mount.
func TestTenThousandSmallFilesIndexAndServeEveryRecordOnce(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	src := filepath.Join(t.TempDir(), "src")
	os.MkdirAll(src, 0o755)
	const n = 10000
	for i := range n {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%05d.tfrecord", i)), records(fmt.Sprint(i), 1, 40), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := startMount(t, src, "--seed", "2", "--block-size", "64KiB", "--parts", "2", "--max-memory", "8MiB")
	base := m.stats()
	seen := map[string]bool{}
	for i := range 2 {
		for _, r := range frames(t, m.read(0, i, 2)) {
			seen[string(r)] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("served %d distinct records, want %d", len(seen), n)
	}
	if s := settledStats(t, m, base); s.OpenFDs > base.OpenFDs {
		t.Fatalf("open file descriptors %d after reading, %d before", s.OpenFDs, base.OpenFDs)
	}
}

// settledStats waits up to 5 s for the daemon's goroutines and descriptors
// to come back to base (with a slack of 4 goroutines for go-fuse's request
// readers), and returns the last stats.
func settledStats(t *testing.T, m *mount, base api.Stats) api.Stats {
	t.Helper()
	var s api.Stats
	for deadline := time.Now().Add(5 * time.Second); ; {
		s = m.stats()
		if s.Goroutines <= base.Goroutines+4 && s.OpenFDs <= base.OpenFDs || time.Now().After(deadline) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// --- 3. Namespace and permissions -------------------------------------------

// TestEveryMutatingOperationGivesEROFS extends TestMountIsReadOnly (open
// for write, create, unlink, rename, chmod, mkdir) to the other calls that
// change a file system.
func TestEveryMutatingOperationGivesEROFS(t *testing.T) {
	src := genSynthetic(t, 500, 8, 2, 1, "clustered")
	m := startMount(t, src, smallFlags...)
	checkEveryMutationGivesEROFS(t, m)
}

// checkEveryMutationGivesEROFS checks that the calls that change a file
// system give EROFS on m, a mount of 500 records, which still serves them.
func checkEveryMutationGivesEROFS(t *testing.T, m *mount) {
	t.Helper()
	p := m.part(0, 0, 1)
	ep := filepath.Join(m.dir, "epoch-0000")
	stats := api.StatsPath(m.dir)
	open := func(path string, flag int) error {
		f, err := os.OpenFile(path, flag, 0o644)
		if err == nil {
			f.Close()
		}
		return err
	}
	checks := map[string]error{
		"truncate":             os.Truncate(p, 0),
		"open O_RDWR":          open(p, os.O_RDWR),
		"open O_APPEND":        open(p, os.O_WRONLY|os.O_APPEND),
		"open O_TRUNC":         open(p, os.O_RDONLY|os.O_TRUNC),
		"create in root":       open(filepath.Join(m.dir, "new"), os.O_WRONLY|os.O_CREATE),
		"create exclusive":     open(filepath.Join(ep, "part-x"), os.O_RDWR|os.O_CREATE|os.O_EXCL),
		"write stats.json":     os.WriteFile(stats, []byte("{}"), 0o644),
		"symlink":              os.Symlink(p, filepath.Join(ep, "link")),
		"hard link":            os.Link(p, filepath.Join(ep, "hard")),
		"chown":                os.Chown(p, 1, 1),
		"utimes":               os.Chtimes(p, time.Now(), time.Now()),
		"rmdir epoch":          syscall.Rmdir(ep),
		"rename epoch":         os.Rename(ep, filepath.Join(m.dir, "renamed")),
		"unlink stats.json":    os.Remove(stats),
		"mknod fifo":           syscall.Mkfifo(filepath.Join(ep, "fifo"), 0o644),
		"setxattr":             syscall.Setxattr(p, "user.corgi", []byte("x"), 0),
		"removexattr":          syscall.Removexattr(p, "user.corgi"),
		"chmod root":           os.Chmod(m.dir, 0o777),
		"mkdir in epoch":       os.Mkdir(filepath.Join(ep, "d"), 0o755),
		"rename into the root": os.Rename(p, filepath.Join(m.dir, "stolen")),
	}
	for op, err := range checks {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: got %v, want EROFS", op, err)
		}
	}
	// Still serving, unchanged.
	if len(frames(t, m.read(0, 0, 1))) != 500 {
		t.Fatal("the part changed")
	}
}

// TestNamesOutsideTheNamespaceGiveENOENT looks up odd names: only the
// canonical epoch and part names resolve, ".." leads to the parent inside
// the mount, and names too long for the kernel fail before reaching corgifs.
func TestNamesOutsideTheNamespaceGiveENOENT(t *testing.T) {
	src := genSynthetic(t, 500, 8, 2, 1, "clustered")
	m := startMount(t, src, append(smallFlags, "--parts", "8")...)
	names := []string{
		"epoch-x", "epoch--1", "epoch-+001", "epoch- 001", "epoch-00000", "epoch-0x10", "epoch-1e3",
		"epoch-99999999999999999999999", "epoch-0000 ", " epoch-0000", "epoch-0000\n", "epoch-0000\xff",
		"EPOCH-0000", "epoch-", "...", ".corgifs/nope", ".corgifs/config.json.bak", ".corgifs/..stats.json",
		"epoch-0000/part-00009-of-00008.tfrecord", "epoch-0000/part-00008-of-00008.tfrecord",
		"epoch-0000/part-00000-of-00000.tfrecord", "epoch-0000/part--0001-of-00002.tfrecord",
		"epoch-0000/part-00000-of-9999999.tfrecord", "epoch-0000/part-00000-of-00001.tfrecords",
		"epoch-0000/part-00000-of-00001", "epoch-0000/part-0-of-1.tfrecord", "epoch-0000/part-00000-of-00001.tfrecord\x01",
		"epoch-0000/..part-00000-of-00001.tfrecord", "epoch-0000/epoch-0000", "epoch-0000/.corgifs",
		"epoch-0000/\xc3\xa9poch", strings.Repeat("e", 255), "epoch-0000/" + strings.Repeat("p", 255),
		// FUSE passes names up to 1024 bytes to the daemon.
		strings.Repeat("e", 256), "epoch-0000/part-00000-of-00001.tfrecord" + strings.Repeat("x", 1024-39),
	}
	for _, name := range names {
		if _, err := os.Lstat(filepath.Join(m.dir, name)); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("lookup %q: got %v, want ENOENT", name, err)
		}
	}
	// Longer still: the kernel may refuse before asking corgifs.
	for _, n := range []int{1025, 4000} {
		if _, err := os.Lstat(filepath.Join(m.dir, strings.Repeat("e", n))); !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("a %d-byte name: got %v, want ENOENT or ENAMETOOLONG", n, err)
		}
	}
	for _, name := range []string{"epoch-0000/part-00000-of-00008.tfrecord/x", ".corgifs/config.json/x"} {
		if _, err := os.Lstat(filepath.Join(m.dir, name)); !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("lookup %q: got %v, want ENOTDIR", name, err)
		}
	}
	// ".." from an epoch is the root of the mount, not something else.
	root, _ := os.Stat(m.dir)
	up, err := os.Stat(m.dir + "/epoch-0003/..")
	if err != nil || !os.SameFile(root, up) {
		t.Errorf("epoch-0003/.. is not the mount root: %v", err)
	}
	if _, err := os.Stat(m.dir + "/epoch-0003/../.corgifs/config.json"); err != nil {
		t.Errorf("epoch-0003/../.corgifs/config.json: %v", err)
	}
}

// TestMountPointInsideSourceIsRefusedAlsoThroughSymlinks checks the mount
// point against the source with symbolic links resolved, and that a source
// named through a symbolic link is indexed and served.
func TestMountPointInsideSourceIsRefusedAlsoThroughSymlinks(t *testing.T) {
	src := genSynthetic(t, 300, 8, 2, 1, "clustered")
	base := t.TempDir()
	os.Mkdir(filepath.Join(src, "mnt"), 0o755)
	defer os.Remove(filepath.Join(src, "mnt"))
	link := filepath.Join(base, "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{src, src}, {src, filepath.Join(link, "mnt")}, {link, filepath.Join(src, "mnt")}} {
		mnt := c[1]
		t.Cleanup(func() { fsUnmountQuiet(mnt) })
		_, stderr, code, _ := runTimed(t, 30*time.Second, "mount", c[0], mnt, "--cache-dir", t.TempDir(), "--nonempty")
		if code != 1 || !strings.Contains(stderr, "inside the source") {
			t.Errorf("mount %s %s: exit %d, want refused as inside the source:\n%s", c[0], c[1], code, stderr)
		}
	}
	os.Remove(filepath.Join(src, "mnt"))
	m := startMount(t, link, "--seed", "1")
	if n := len(frames(t, m.read(0, 0, 1))); n != 300 {
		t.Fatalf("source named through a symlink serves %d records, want 300", n)
	}
}

// mountOptions returns the options of the mount at dir in /proc/mounts.
func mountOptions(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[1] == dir {
			return strings.Split(f[3], ",")
		}
	}
	t.Fatalf("%s not in /proc/mounts", dir)
	return nil
}

// TestAllowOtherIsSetOnlyWhenAsked reads the mount options the kernel shows.
func TestAllowOtherIsSetOnlyWhenAsked(t *testing.T) {
	src := genSynthetic(t, 100, 4, 2, 1, "clustered")
	m := startMount(t, src, "--seed", "1")
	opts := mountOptions(t, m.dir)
	if slices.Contains(opts, "allow_other") || !slices.Contains(opts, "ro") {
		t.Errorf("default mount options %v: want ro and no allow_other", opts)
	}
	m = startMount(t, src, "--seed", "1", "--allow-other")
	if opts := mountOptions(t, m.dir); !slices.Contains(opts, "allow_other") {
		t.Errorf("--allow-other mount options %v: want allow_other", opts)
	}
}

// TestSymlinksOutOfSourceAreFollowedOnlyWithFollowSymlinks puts links to a
// file and a directory outside SRC, a loop and a dangling link in SRC.
// Without --follow-symlinks only the real file is served, and a file
// replaced by a link out of SRC after indexing is not read through it; with
// the flag the linked files are served too, the loop once, and the two
// indexes have separate sidecars.
func TestSymlinksOutOfSourceAreFollowedOnlyWithFollowSymlinks(t *testing.T) {
	base := t.TempDir()
	src, outside := filepath.Join(base, "src"), filepath.Join(base, "outside")
	writeFile(t, filepath.Join(src, "a.tfrecord"), records("a", 10, 60))
	writeFile(t, filepath.Join(outside, "b.tfrecord"), records("b", 20, 60))
	writeFile(t, filepath.Join(outside, "dir", "c.tfrecord"), records("c", 30, 60))
	for link, to := range map[string]string{
		"link-b.tfrecord": filepath.Join(outside, "b.tfrecord"), "linkdir": filepath.Join(outside, "dir"),
		"loop": ".", "dangling.tfrecord": filepath.Join(outside, "nothing"),
	} {
		if err := os.Symlink(to, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	index := func(flags ...string) (string, string) {
		out, stderr, code, _ := runTimed(t, 30*time.Second, append([]string{"index", src, "--cache-dir", cache}, flags...)...)
		if code != 0 {
			t.Fatalf("index %v: exit %d\n%s", flags, code, stderr)
		}
		return out, stderr
	}
	if out, _ := index(); !strings.Contains(out, "files       1\n") || !strings.Contains(out, "records     10\n") {
		t.Errorf("without --follow-symlinks:\n%s", out)
	}
	out, stderr := index("--follow-symlinks")
	if !strings.Contains(out, "files       3\n") || !strings.Contains(out, "records     60\n") || !strings.Contains(out, "from cache  false") {
		t.Errorf("with --follow-symlinks:\n%s", out)
	}
	if !strings.Contains(stderr, "reached again") || !strings.Contains(stderr, "leads nowhere") {
		t.Errorf("the loop and the dangling link are not logged:\n%s", stderr)
	}
	if out, _ := index(); !strings.Contains(out, "files       1\n") || !strings.Contains(out, "from cache  true") {
		t.Errorf("the sidecar without --follow-symlinks was not kept apart:\n%s", out)
	}
	// Files in path order: a.tfrecord, link-b.tfrecord, linkdir/c.tfrecord.
	m := startMount(t, src, "--seed", "1", "--strategy", "none", "--follow-symlinks")
	var tags []string
	for _, r := range frames(t, m.read(0, 0, 1)) {
		if tag := string(r[:1]); len(tags) == 0 || tags[len(tags)-1] != tag {
			tags = append(tags, tag)
		}
	}
	if !slices.Equal(tags, []string{"a", "b", "c"}) {
		t.Errorf("with --follow-symlinks and strategy none the records come from %v, want a, b, c", tags)
	}

	m = startMount(t, src, "--seed", "1")
	// Replace the indexed file by a link out of the source with the same
	// size: the loader opens beneath SRC only.
	fi, _ := os.Stat(filepath.Join(src, "a.tfrecord"))
	writeFile(t, filepath.Join(outside, "evil.tfrecord"), records("e", 10, 60))
	os.Chtimes(filepath.Join(outside, "evil.tfrecord"), fi.ModTime(), fi.ModTime())
	os.Remove(filepath.Join(src, "a.tfrecord"))
	os.Symlink(filepath.Join(outside, "evil.tfrecord"), filepath.Join(src, "a.tfrecord"))
	if got, err := readUntilErr(m.part(0, 0, 1)); !errors.Is(err, syscall.EIO) || len(got) != 0 {
		t.Errorf("a file swapped for a link out of SRC: read %d bytes, error %v; want EIO", len(got), err)
	}
	if log, ok := m.logHas("escapes"); !ok {
		t.Errorf("the log does not say the path escapes the source:\n%s", log)
	}
}

// --- 4. Load ----------------------------------------------------------------

// vmHWM returns the peak resident size of process pid in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// rssMargin is what the daemon may hold beyond --max-memory: the soft
// memory limit of the Go heap is --max-memory + 64 MiB (set by mount), and
// beyond the heap come the runtime, goroutine stacks and the code; a
// race-detector build (daemonRace) also keeps shadow memory for every heap
// byte and a history per goroutine. Measured on this test: 79 MiB peak with
// -race.
func rssMargin(t testing.TB) int64 {
	const heapSlack, runtime = 64 << 20, 64 << 20
	if daemonRace(t) {
		return heapSlack + runtime + 128<<20
	}
	return heapSlack + runtime
}

// TestLoadManyReadersAndFioServeExactBytesWithinMemoryWithoutLeaks runs 32
// readers over 32 different (epoch, part) files, each mixing sequential
// reads of random sizes with random ReadAt, next to a fio random-read job,
// for as long as fio runs (5 s). Every byte must equal a sequential read of
// the same part; memory must stay within --max-memory by the loader's
// accounting and within --max-memory plus rssMargin by the peak RSS; and
// after the readers close, the daemon's goroutines and file descriptors
// must come back to where they were.
func TestLoadManyReadersAndFioServeExactBytesWithinMemoryWithoutLeaks(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		testenv.Missing(t, "no fio")
	}
	src := genSynthetic(t, 24000, 16, 4, 4, "shuffled")
	const budget = 4 << 20
	const k, epochs = 8, 4
	m := startMount(t, src, "--block-size", "64KiB", "--buffer", "256KiB", "--max-memory", "4MiB", "--seed", "7", "--parts", fmt.Sprint(k))
	var want [epochs][k][]byte
	for e := range epochs {
		for i := range k {
			want[e][i] = m.read(e, i, k)
		}
	}
	time.Sleep(200 * time.Millisecond)
	base := m.stats()

	fioDone := make(chan struct{})
	var fioOut []byte
	var fioErr error
	go func() {
		defer close(fioDone)
		fioOut, fioErr = exec.Command("fio", "--name=corgifs-randread", "--filename="+m.part(0, 0, k), "--readonly",
			"--rw=randread", "--bs=4k", "--ioengine=psync", "--time_based", "--runtime=5",
			fmt.Sprintf("--size=%d", len(want[0][0])), "--output-format=json").CombinedOutput()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, epochs*k)
	var passes, readBytes int64
	var mu sync.Mutex
	for e := range epochs {
		for i := range k {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(e), uint64(i)))
				w := want[e][i]
				for pass := 0; ; pass++ {
					select {
					case <-fioDone:
						if pass > 0 {
							return
						}
					default:
					}
					n, err := readerPass(m.part(e, i, k), w, r)
					mu.Lock()
					passes++
					readBytes += n
					mu.Unlock()
					if err != nil {
						errs <- fmt.Errorf("epoch %d part %d pass %d: %w", e, i, pass, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	<-fioDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var fio struct {
		Jobs []struct {
			Error int
			Read  struct {
				IOBytes int64 `json:"io_bytes"`
			}
		}
	}
	if i := bytes.IndexByte(fioOut, '{'); fioErr != nil || i < 0 || json.Unmarshal(fioOut[i:], &fio) != nil || len(fio.Jobs) != 1 || fio.Jobs[0].Error != 0 || fio.Jobs[0].Read.IOBytes == 0 {
		t.Errorf("fio: %v\n%s", fioErr, fioOut)
	}
	t.Logf("%d reader passes, %d bytes read by the readers, %d by fio", passes, readBytes, fio.Jobs[0].Read.IOBytes)

	s := m.stats()
	// The slabs get --max-memory less the heap's estimate (memorySplit).
	if s.MemoryPeak > s.MemoryBudget || s.MemoryBudget > budget || s.MemoryBudget < budget/2 {
		t.Errorf("loader memory peak %d bytes, budget %d (reported %d)", s.MemoryPeak, budget, s.MemoryBudget)
	}
	if hwm := vmHWM(t, m.cmd.Process.Pid); hwm > budget+rssMargin(t) {
		t.Errorf("daemon peak RSS %d MiB, want at most %d MiB (--max-memory + margin)", hwm>>20, (budget+rssMargin(t))>>20)
	} else {
		t.Logf("daemon peak RSS %d MiB", hwm>>20)
	}
	after := settledStats(t, m, base)
	t.Logf("goroutines %d -> %d, open fds %d -> %d", base.Goroutines, after.Goroutines, base.OpenFDs, after.OpenFDs)
	if after.Goroutines > base.Goroutines+4 || after.OpenFDs > base.OpenFDs {
		t.Errorf("leak after the readers closed: goroutines %d -> %d, open fds %d -> %d", base.Goroutines, after.Goroutines, base.OpenFDs, after.OpenFDs)
	}
}

// readerPass reads path once sequentially in reads of random sizes, then
// at a few random offsets, comparing everything with want. It returns the
// bytes read.
func readerPass(path string, want []byte, r *rand.Rand) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var got []byte
	for {
		buf := make([]byte, 1+r.IntN(300<<10))
		n, err := f.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return int64(len(got)), err
		}
	}
	if !bytes.Equal(got, want) {
		return int64(len(got)), fmt.Errorf("sequential read differs from the expected bytes (%d vs %d bytes)", len(got), len(want))
	}
	total := int64(len(got))
	for range 20 {
		off := r.Int64N(int64(len(want)) + 1)
		buf := make([]byte, 1+r.IntN(200<<10))
		n, err := f.ReadAt(buf, off)
		total += int64(n)
		if err != nil && err != io.EOF {
			return total, err
		}
		if !bytes.Equal(buf[:n], want[off:min(int(off)+len(buf), len(want))]) {
			return total, fmt.Errorf("ReadAt(%d bytes at %d) differs from the expected bytes", len(buf), off)
		}
	}
	return total, nil
}

// --- 5. Memory pressure -----------------------------------------------------

// TestMemoryPressureMakesReadersWaitAndServesExactBytes opens 12 parts at
// once under a budget of 1 MiB, which holds two of their 512 KiB buffers:
// readers must wait for memory (memory_waits), the loader must stay within
// the budget, and every part must equal the same part read from a mount
// with plenty of memory.
func TestMemoryPressureMakesReadersWaitAndServesExactBytes(t *testing.T) {
	src := genSynthetic(t, 20000, 16, 4, 4, "shuffled")
	flags := []string{"--block-size", "64KiB", "--buffer", "512KiB", "--seed", "3"}
	const k = 12
	ref := startMount(t, src, flags...)
	m := startMount(t, src, append(flags, "--max-memory", "1MiB")...)
	var wg sync.WaitGroup
	got := make([][]byte, k)
	errs := make([]error, k)
	for i := range k {
		wg.Go(func() { got[i], errs[i] = readUntilErr(m.part(0, i, k)) })
	}
	wg.Wait()
	for i := range k {
		if errs[i] != nil {
			t.Fatalf("part %d: %v\n%s", i, errs[i], m.log)
		}
		if !bytes.Equal(got[i], ref.read(0, i, k)) {
			t.Errorf("part %d under memory pressure differs from the same part with plenty of memory", i)
		}
	}
	s := m.stats()
	if s.MemoryWaits == 0 {
		t.Errorf("no reader waited for memory: %+v", s)
	}
	if s.MemoryPeak > 1<<20 {
		t.Errorf("memory peak %d over the budget of 1 MiB", s.MemoryPeak)
	}
}

// TestMaxMemoryBelowOneBlockFailsNamingTheSmallestWorkableValue mounts a
// source whose largest block is a 100 KiB record (a block by itself: it
// starts at a multiple of the 16 KiB block size, after 128 frames of 128
// bytes, and spans the next ones) with 64 KiB of memory: the mount must fail
// at start and name the smallest workable --max-memory, and that value must
// work.
func TestMaxMemoryBelowOneBlockFailsNamingTheSmallestWorkableValue(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "a.tfrecord"), slices.Concat(records("s", 128, 112), records("big", 1, 100<<10), records("t", 300, 100)))
	flags := []string{"--block-size", "16KiB", "--seed", "4", "--cache-dir", t.TempDir()}
	mnt := t.TempDir()
	t.Cleanup(func() { fsUnmountQuiet(mnt) })
	_, stderr, code, _ := runTimed(t, 30*time.Second, append([]string{"mount", src, mnt, "--max-memory", "64KiB"}, flags...)...)
	match := regexp.MustCompile(`smaller than the largest block.*use at least --max-memory (\d+)`).FindStringSubmatch(stderr)
	if code != 1 || match == nil {
		t.Fatalf("exit %d, want a failure naming the smallest --max-memory:\n%s", code, stderr)
	}
	// The slabs get --max-memory less the heap's estimate of the index (20
	// bytes for each of the 429 records here), so the value is the block
	// plus that; one byte less must fail again.
	named, _ := strconv.ParseInt(match[1], 10, 64)
	if block := int64(100<<10 + 16); named < block || named > block+16<<10 {
		t.Errorf("named --max-memory %s, want the largest block, %d, plus the index's share of the heap", match[1], block)
	}
	if _, stderr, code, _ := runTimed(t, 30*time.Second, append([]string{"mount", src, mnt, "--max-memory", fmt.Sprint(named - 1)}, flags...)...); code != 1 || !strings.Contains(stderr, "smaller than the largest block") {
		t.Errorf("--max-memory %d, one byte below the value named: exit %d, want the same refusal:\n%s", named-1, code, stderr)
	}
	m := startMount(t, src, append(flags, "--max-memory", match[1], "--parts", "2")...)
	want := sortedHashes(sourceRecords(t, src))
	parts := make([][]byte, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { parts[i], errs[i] = readUntilErr(m.part(0, i, 2)) })
	}
	wg.Wait()
	var got [][32]byte
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("part %d: %v", i, errs[i])
		}
		got = append(got, hashes(frames(t, parts[i]))...)
	}
	if !slices.Equal(sortedHashes(got), want) {
		t.Fatalf("with the named --max-memory, %d records served, want the %d source records once", len(got), len(want))
	}
}

// --- 6. Shutdown ------------------------------------------------------------

// TestSignalWithManyReadersMidReadExitsZeroAndFreesMountpoint sends SIGINT
// or SIGTERM while 8 readers are in the middle of their parts: the daemon
// must exit 0 within a few seconds, the readers' reads must end, and the
// mount point must be an ordinary directory again.
func TestSignalWithManyReadersMidReadExitsZeroAndFreesMountpoint(t *testing.T) {
	src := genSynthetic(t, 20000, 32, 4, 2, "clustered")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			m := startMount(t, src, append(smallFlags, "--parts", "4")...)
			var wg sync.WaitGroup
			started := make(chan struct{}, 8)
			for r := range 8 {
				f, err := os.Open(m.part(r%2, r%4, 4))
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					defer f.Close()
					buf := make([]byte, 4096)
					for n := 0; ; n++ {
						if _, err := f.Read(buf); err != nil {
							return
						}
						if n == 0 {
							started <- struct{}{}
						}
						time.Sleep(time.Millisecond)
					}
				})
			}
			for range 8 {
				<-started
			}
			start := time.Now()
			m.cmd.Process.Signal(sig)
			select {
			case <-m.done:
			case <-time.After(10 * time.Second):
				t.Errorf("daemon still running 10 s after %v", sig)
			}
			readersDone := make(chan struct{})
			go func() { wg.Wait(); close(readersDone) }()
			select {
			case <-readersDone:
			case <-time.After(5 * time.Second):
				t.Errorf("readers still blocked 5 s after the daemon exited")
			}
			t.Logf("exited %v after %v", m.exit, time.Since(start))
			m.stop() // exit 0, no data race, nothing mounted
			if err := os.WriteFile(filepath.Join(m.dir, "x"), nil, 0o644); err != nil {
				t.Fatalf("mount point not usable after exit: %v", err)
			}
			os.Remove(filepath.Join(m.dir, "x"))
		})
	}
}

// mountAt is startMount at a given, existing mount point.
func mountAt(t *testing.T, src, dir string, flags ...string) *mount {
	t.Helper()
	m := &mount{t: t, dir: dir, log: &syncBuffer{}, done: make(chan struct{})}
	m.cmd = exec.Command(binFor(t), append([]string{"mount", src, dir}, flags...)...)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exit = m.cmd.Wait(); close(m.done) }()
	t.Cleanup(m.stop)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(api.ConfigPath(dir)); err == nil {
			return m
		}
		select {
		case <-m.done:
			t.Fatalf("corgifs mount exited early: %v\n%s", m.exit, m.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount did not come up in time\n%s", m.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSigkillLeavesDeadMountThatUnmountClears kills the daemon with a file
// open: the mount is left dead (ENOTCONN), a new mount there says to run
// corgifs unmount, which clears it, and the point can be mounted again.
func TestSigkillLeavesDeadMountThatUnmountClears(t *testing.T) {
	src := genSynthetic(t, 2000, 8, 2, 1, "clustered")
	cache := t.TempDir()
	m := startMount(t, src, "--seed", "1", "--cache-dir", cache)
	t.Cleanup(func() { fsUnmountQuiet(m.dir) })
	f, err := os.Open(m.part(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Read(make([]byte, 4096))
	// Kill only once the mount has finished starting: go-fuse's poll probe
	// closes a file on the new mount, and a daemon killed while that close
	// waits for its own answer cannot die (see RELIABILITY.md).
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(m.log.String(), "msg=mounted"); {
		if time.Now().After(deadline) {
			t.Fatalf("no 'mounted' log line:\n%s", m.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.cmd.Process.Kill()
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the killed daemon did not exit")
	}
	m.closed = true // stop would report the kill
	if _, err := os.ReadDir(m.dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after SIGKILL, listing the mount point: %v, want ENOTCONN (a dead mount)", err)
	}
	_, stderr, code, _ := runTimed(t, 30*time.Second, "mount", src, m.dir, "--seed", "1", "--cache-dir", cache)
	if want := "run 'corgifs unmount " + m.dir + "'"; code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("mount on a dead mount: exit %d, want it to say %q:\n%s", code, want, stderr)
	}
	if _, stderr, code, _ := runTimed(t, 30*time.Second, "unmount", m.dir); code != 0 {
		t.Fatalf("corgifs unmount: exit %d\n%s", code, stderr)
	}
	if mounted(m.dir) {
		t.Fatalf("%s still mounted after corgifs unmount", m.dir)
	}
	if _, err := os.Stat(m.dir); err != nil {
		t.Fatalf("mount point after corgifs unmount: %v", err)
	}
	m2 := mountAt(t, src, m.dir, "--seed", "1", "--cache-dir", cache)
	if n := len(frames(t, m2.read(0, 0, 1))); n != 2000 {
		t.Fatalf("remount serves %d records, want 2000", n)
	}
}

// --- 7. Panics --------------------------------------------------------------

// TestPanicInLookupIsRecoveredAsEIOAndDaemonKeepsServing uses the test hook
// CORGIFS_TEST_PANIC_LOOKUP, which makes a lookup of exactly that name in
// the root panic; without it the name is an ordinary missing name.
func TestPanicInLookupIsRecoveredAsEIOAndDaemonKeepsServing(t *testing.T) {
	src := genSynthetic(t, 1000, 8, 2, 1, "clustered")
	const name = "corgifs-test-panic"
	plain := startMount(t, src, "--seed", "1")
	if _, err := os.Stat(filepath.Join(plain.dir, name)); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("without the hook, lookup of %s: %v, want ENOENT", name, err)
	}
	t.Setenv("CORGIFS_TEST_PANIC_LOOKUP", name)
	m := startMount(t, src, "--seed", "1")
	for range 2 {
		if _, err := os.Stat(filepath.Join(m.dir, name)); !errors.Is(err, syscall.EIO) {
			t.Fatalf("lookup that panics: %v, want EIO", err)
		}
	}
	// The EIO can reach the test before the log line that explains it.
	if log, ok := m.logHas("panic in FUSE handler", "test hook: lookup of "+name, "(*rootNode).Lookup"); !ok {
		t.Errorf("the panic is not logged with its stack:\n%s", log)
	}
	if n := len(frames(t, m.read(0, 0, 1))); n != 1000 {
		t.Fatalf("after the panic, a part serves %d records, want 1000", n)
	}
}

// --- 8. The index sidecar ---------------------------------------------------

// TestDamagedOrForeignSidecarIsLoggedAndRebuilt replaces the sidecar in
// --cache-dir with garbage, a truncated copy, a copy with a flipped byte and
// another source's sidecar: each open (a mount for the first) logs why it
// rebuilds, serves, and leaves a good sidecar.
func TestDamagedOrForeignSidecarIsLoggedAndRebuilt(t *testing.T) {
	src := genSynthetic(t, 1000, 8, 2, 2, "clustered")
	other := genSynthetic(t, 10, 8, 2, 1, "clustered")
	cache, otherCache := t.TempDir(), t.TempDir()
	corgifs(t, "index", src, "--cache-dir", cache)
	corgifs(t, "index", other, "--cache-dir", otherCache)
	sidecars, _ := filepath.Glob(filepath.Join(cache, "*.index"))
	foreign, _ := filepath.Glob(filepath.Join(otherCache, "*.index"))
	if len(sidecars) != 1 || len(foreign) != 1 {
		t.Fatalf("sidecars %v %v", sidecars, foreign)
	}
	good, _ := os.ReadFile(sidecars[0])
	bad, _ := os.ReadFile(foreign[0])
	for _, c := range []struct {
		name   string
		data   []byte
		reason string
	}{
		{"garbage", []byte("this is not an index\x00\x01\x02"), "is not a corgifs index"},
		{"truncated", good[:len(good)*2/3], "is corrupt"},
		{"flipped byte", func() []byte { b := slices.Clone(good); b[len(b)-40] ^= 1; return b }(), "is corrupt"},
		{"foreign", bad, "belongs to other parameters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			writeFile(t, sidecars[0], c.data)
			if c.name == "garbage" {
				// Through a mount once; the index command opens the index
				// the same way and is quicker.
				m := startMount(t, src, "--seed", "1", "--cache-dir", cache)
				if log, ok := m.logHas("rebuilding index", c.reason); !ok {
					t.Errorf("mount does not log why it rebuilds (want %q):\n%s", c.reason, log)
				}
				if n := len(frames(t, m.read(0, 0, 1))); n != 1000 {
					t.Fatalf("serves %d records, want 1000", n)
				}
			} else {
				out, stderr, code, _ := runTimed(t, 30*time.Second, "index", src, "--cache-dir", cache)
				if code != 0 || !strings.Contains(stderr, "rebuilding index") || !strings.Contains(stderr, c.reason) || !strings.Contains(out, "records     1000\n") {
					t.Errorf("index does not log why it rebuilds (want %q), exit %d:\n%s%s", c.reason, code, out, stderr)
				}
			}
			if out, _, _, _ := runTimed(t, 30*time.Second, "index", src, "--cache-dir", cache); !strings.Contains(out, "from cache  true") {
				t.Errorf("the sidecar was not rewritten:\n%s", out)
			}
		})
	}
}
