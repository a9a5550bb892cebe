package tests

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// inodes returns the daemon's live inode count from stats.json.
func (m *mount) inodes() int64 {
	m.t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, ".corgifs", "stats.json"))
	if err != nil {
		m.t.Fatalf("stats.json: %v\n%s", err, m.log)
	}
	var s struct {
		Inodes *int64 `json:"inodes"`
	}
	if err := json.Unmarshal(b, &s); err != nil || s.Inodes == nil {
		m.t.Fatalf("stats.json has no inodes (%v):\n%s", err, b)
	}
	return *s.Inodes
}

// waitInodes polls the daemon's live inode count until it is at most want
// (the kernel sends its FORGETs asynchronously) or 20 s have passed, and
// returns the last count.
func waitInodes(m *mount, want int64) int64 {
	n := m.inodes()
	for deadline := time.Now().Add(20 * time.Second); n > want && time.Now().Before(deadline); n = m.inodes() {
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// procStatus returns a field of /proc/pid/status in bytes (VmRSS, VmHWM).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestLookingUpManyValidNamesLeavesNoInodesBehind stats 100,000 distinct
// valid part names that the mount does not list (epochs past --epochs,
// and K other than --parts) beside the 16 it lists. The daemon keeps a node
// for every name the kernel caches, and the kernel caches names until
// memory runs short: unlisted names must be dropped at once, so the live
// inode count must come back to about the listed names and the epoch
// directories walked, and the daemon's memory must stay within
// --max-memory plus its margin. As root, dropping the kernel's dentries
// must then take the count down to the few nodes in use.
func TestLookingUpManyValidNamesLeavesNoInodesBehind(t *testing.T) {
	src := genSynthetic(t, 2000, 8, 2, 2, "shuffled")
	const budget = 16 << 20
	const epochs, parts = 4, 4
	m := startMount(t, src, "--block-size", "64KiB", "--max-memory", "16MiB", "--seed", "5",
		"--epochs", fmt.Sprint(epochs), "--parts", fmt.Sprint(parts))
	resetPeakRSS(t, m.cmd.Process.Pid)
	base := m.inodes()
	for e := range epochs {
		for i := range parts {
			if _, err := os.Stat(m.part(e, i, parts)); err != nil {
				t.Fatal(err)
			}
		}
	}
	listed := m.inodes()
	if listed < base+epochs*parts {
		t.Fatalf("%d live inodes after stat of the %d listed parts, started with %d: the listed names should stay cached", listed, epochs*parts, base)
	}

	// Names in 12 listed and 88 unlisted epoch directories, K from 5 to
	// 44: 1,000 names per epoch.
	const names = 100_000
	dirs := map[int]bool{}
	n := 0
	for e := 0; n < names; e++ {
		epoch := e
		if e >= 12 {
			epoch = 1000 + e
		}
		dirs[epoch] = true
		for k := 5; k <= 44 && n < names; k++ {
			for i := 0; i < k && n < names; i += 1 + k/25 {
				if _, err := os.Stat(m.part(epoch, i, k)); err != nil {
					t.Fatalf("stat of valid name %s: %v", m.part(epoch, i, k), err)
				}
				n++
			}
		}
	}
	// The nodes that may stay: the listed parts, the epoch directories
	// walked, .corgifs and stats.json, and a few lookups late to be dropped.
	want := listed + int64(len(dirs)) + 8
	got := waitInodes(m, want)
	t.Logf("%d names in %d epoch directories: live inodes %d -> %d -> %d (want at most %d)", n, len(dirs), base, listed, got, want)
	if got > want {
		t.Errorf("%d live inodes after stat of %d unlisted names, want at most %d: the daemon keeps nodes for names nobody uses", got, n, want)
	}
	rss, hwm := procStatus(t, m.cmd.Process.Pid, "VmRSS"), procStatus(t, m.cmd.Process.Pid, "VmHWM")
	t.Logf("daemon RSS %d MiB, peak %d MiB", rss>>20, hwm>>20)
	if hwm > budget+rssMargin(t) {
		t.Errorf("daemon peak RSS %d MiB after %d lookups, want at most %d MiB (--max-memory + margin)", hwm>>20, n, (budget+rssMargin(t))>>20)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: not dropping the kernel's dentries")
		return
	}
	// Dropping the kernel's unused dentries and inodes (not the page
	// cache) must make the daemon forget every node not in use.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Logf("cannot drop the kernel's dentries: %v", err)
		return
	}
	if got := waitInodes(m, base+2); got > base+2 {
		t.Errorf("%d live inodes after the kernel dropped its dentries, want at most %d", got, base+2)
	}
}

// TestListedNamesPastTheInodeCapAreNotKept lists 20,000 parts, more than
// the 16,384 nodes whose names the kernel may cache, and stats them all:
// the daemon's live inodes must stay at about that cap.
func TestListedNamesPastTheInodeCapAreNotKept(t *testing.T) {
	src := genSynthetic(t, 2000, 8, 2, 2, "shuffled")
	const parts, maxCached = 20_000, 16 << 10
	m := startMount(t, src, "--block-size", "64KiB", "--max-memory", "16MiB", "--seed", "5", "--epochs", "1", "--parts", fmt.Sprint(parts))
	for i := range parts {
		if _, err := os.Stat(m.part(0, i, parts)); err != nil {
			t.Fatal(err)
		}
	}
	want := int64(maxCached + 8)
	got := waitInodes(m, want)
	t.Logf("%d listed parts: %d live inodes", parts, got)
	if got > want {
		t.Errorf("%d live inodes after stat of %d listed parts, want at most %d", got, parts, want)
	}
}

// resetPeakRSS resets the VmHWM of process pid to its current RSS.
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS of the daemon: %v", err)
	}
}

// readAllHash reads path to its end in reads of 1 MiB and returns the
// SHA-256 of its bytes and their count.
func readAllHash(path string) ([32]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return [32]byte{}, 0, err
	}
	defer f.Close()
	h := sha256.New()
	// Not io.Copy: *os.File's WriteTo would read in 32 KiB pieces.
	buf := make([]byte, 1<<20)
	var total int64
	for {
		n, err := f.Read(buf)
		h.Write(buf[:n])
		total += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return [32]byte{}, total, err
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, total, nil
}

// TestManyConcurrentReadersStayWithinMaxMemoryPlus64MiB has 256 readers
// read 256 different parts at once (the 64 parts of 4 epochs, 4 MiB each)
// at --max-memory 16MiB: the daemon's peak RSS must stay within
// --max-memory + 64 MiB, as README promises (each read in flight holds a
// reply buffer of up to 1 MiB, so the requests served at once must be
// bounded), and every part must equal the same part read alone afterwards.
func TestManyConcurrentReadersStayWithinMaxMemoryPlus64MiB(t *testing.T) {
	src := genSynthetic(t, 50000, 1280, 4, 8, "shuffled")
	const budget, readers, k = 16 << 20, 256, 64
	m := startMount(t, src, "--max-memory", "16MiB", "--seed", "9", "--parts", fmt.Sprint(k))
	// The peak so far is the indexing's, which this test does not measure.
	resetPeakRSS(t, m.cmd.Process.Pid)
	sums := make([][32]byte, readers)
	sizes := make([]int64, readers)
	errs := make([]error, readers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range readers {
		wg.Go(func() {
			<-start
			sums[r], sizes[r], errs[r] = readAllHash(m.part(r/k, r%k, k))
		})
	}
	close(start)
	wg.Wait()
	hwm := procStatus(t, m.cmd.Process.Pid, "VmHWM")
	var total int64
	for r := range readers {
		if errs[r] != nil {
			t.Fatalf("epoch %d part %d: %v\n%s", r/k, r%k, errs[r], m.log)
		}
		total += sizes[r]
	}
	limit := int64(budget + 64<<20)
	if daemonRace(t) {
		// The race detector's shadow memory and per-goroutine history:
		// measured 171 to 217 MiB in all.
		limit += 192 << 20
	}
	t.Logf("%d readers read %d MiB; daemon peak RSS %d MiB (limit %d MiB)", readers, total>>20, hwm>>20, limit>>20)
	if hwm > limit {
		t.Errorf("daemon peak RSS %d MiB with %d readers, want at most %d MiB (--max-memory + 64 MiB)", hwm>>20, readers, limit>>20)
	}
	for r := range readers {
		sum, n, err := readAllHash(m.part(r/k, r%k, k))
		if err != nil {
			t.Fatalf("epoch %d part %d read alone: %v", r/k, r%k, err)
		}
		if sum != sums[r] || n != sizes[r] {
			t.Errorf("epoch %d part %d read by one of %d concurrent readers (%d bytes) differs from the part read alone (%d bytes)", r/k, r%k, readers, sizes[r], n)
		}
	}
}
