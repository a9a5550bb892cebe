package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/tfexample"
)

// smallFlags make a few-megabyte dataset span many blocks and buffers.
var smallFlags = []string{"--block-size", "64KiB", "--buffer", "256KiB", "--seed", "11"}

var allStrategies = []string{"corgipile", "block", "none", "window", "full", "once"}

func TestEveryRecordServedExactlyOncePerEpoch(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	src := genSynthetic(t, 20000, 16, 4, 5, "clustered")
	want := sortedHashes(sourceRecords(t, src))
	for _, strategy := range allStrategies {
		t.Run(strategy, func(t *testing.T) {
			m := startMount(t, src, append(smallFlags, "--strategy", strategy)...)
			for _, k := range []int{1, 3, 8} {
				for e := range 2 {
					var got [][32]byte
					for i := range k {
						got = append(got, hashes(frames(t, m.read(e, i, k)))...)
					}
					if !slices.Equal(sortedHashes(got), want) {
						t.Fatalf("epoch %d with %d parts: %d records served, want each of the %d source records once", e, k, len(got), len(want))
					}
				}
			}
		})
	}
}

func TestPartSizeAtStatEqualsBytesServed(t *testing.T) {
	src := genSynthetic(t, 5000, 16, 4, 3, "shuffled")
	m := startMount(t, src, append(smallFlags, "--parts", "3")...)
	var total int64
	for i := range 3 {
		fi, err := os.Stat(m.part(0, i, 3))
		if err != nil {
			t.Fatal(err)
		}
		if n := int64(len(m.read(0, i, 3))); n != fi.Size() {
			t.Fatalf("part %d: stat says %d bytes, read gives %d", i, fi.Size(), n)
		}
		total += fi.Size()
	}
	var cfg struct {
		Dataset struct{ Bytes, Records int64 }
	}
	b, err := os.ReadFile(api.ConfigPath(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if total != cfg.Dataset.Bytes || cfg.Dataset.Records != 5000 {
		t.Fatalf("parts hold %d bytes, config.json says %d bytes and %d records", total, cfg.Dataset.Bytes, cfg.Dataset.Records)
	}
}

func TestMountsWithSameSeedServeIdenticalBytes(t *testing.T) {
	src := genSynthetic(t, 8000, 16, 4, 4, "clustered")
	for _, strategy := range allStrategies {
		t.Run(strategy, func(t *testing.T) {
			a := startMount(t, src, append(smallFlags, "--strategy", strategy)...)
			b := startMount(t, src, append(smallFlags, "--strategy", strategy)...)
			c := startMount(t, src, "--block-size", "64KiB", "--buffer", "256KiB", "--seed", "12", "--strategy", strategy)
			for _, k := range []int{1, 2} {
				for i := range k {
					x, y := a.read(0, i, k), b.read(0, i, k)
					if !bytes.Equal(x, y) {
						t.Fatalf("part %d/%d differs between two mounts with the same seed", i, k)
					}
					// none and once serve the same order every epoch and for every seed.
					same := strategy == "none" || strategy == "once"
					if bytes.Equal(x, a.read(1, i, k)) != same {
						t.Fatalf("part %d/%d: epochs 0 and 1 identical: %v, want %v", i, k, !same, same)
					}
					if bytes.Equal(x, c.read(0, i, k)) != (strategy == "none") {
						t.Fatalf("part %d/%d: seeds 11 and 12 give identical bytes: %v", i, k, strategy != "none")
					}
				}
			}
		})
	}
}

func TestReadsAtAnyOffsetEqualSequentialRead(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	src := genSynthetic(t, 10000, 16, 4, 3, "clustered")
	for _, strategy := range allStrategies {
		t.Run(strategy, func(t *testing.T) {
			m := startMount(t, src, append(smallFlags, "--strategy", strategy)...)
			randomReadsMatch(t, m)
		})
	}
}

// With records of 32 KiB a read of a part needs few slices of the loaded
// blocks, so the daemon hands the kernel those slices instead of copying
// them into the reply; the kernel then copies them from the slabs while
// other reads load and recycle buffers.
func TestLargeRecordsServedStraightFromTheSlabsAreExactAndOncePerEpoch(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	src := genSynthetic(t, 300, 8000, 4, 3, "clustered")
	want := sortedHashes(sourceRecords(t, src))
	for _, strategy := range []string{"corgipile", "none"} {
		t.Run(strategy, func(t *testing.T) {
			m := startMount(t, src, "--block-size", "1MiB", "--buffer", "3MiB", "--max-memory", "16MiB", "--seed", "5", "--strategy", strategy)
			for _, k := range []int{1, 3} {
				var got [][32]byte
				for i := range k {
					got = append(got, hashes(frames(t, m.read(0, i, k)))...)
				}
				if !slices.Equal(sortedHashes(got), want) {
					t.Fatalf("%d parts: %d records served, want each of the %d source records once", k, len(got), len(want))
				}
			}
			randomReadsMatch(t, m)
			st := m.stats()
			t.Logf("%d of %d bytes served as slices of the slabs", st.BytesServedFromSlabs, st.BytesServed)
			if st.BytesServedFromSlabs < st.BytesServed/2 {
				t.Errorf("%d of %d bytes served as slices of the slabs, want most", st.BytesServedFromSlabs, st.BytesServed)
			}
		})
	}
}

func randomReadsMatch(t *testing.T, m *mount) {
	whole := m.read(2, 0, 1)
	f, err := os.Open(m.part(2, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 2))
	size := int64(len(whole))
	offsets := []int64{0, size - 1, size, size + 10, 256<<10 - 3, 512<<10 - 1}
	for range 300 {
		offsets = append(offsets, r.Int64N(size+100))
	}
	for _, off := range offsets {
		n := 1 + r.IntN(700<<10) // often crosses one or more buffer boundaries
		buf := make([]byte, n)
		got, err := f.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("ReadAt(%d, %d): %v", n, off, err)
		}
		want := whole[min(off, size):min(off+int64(n), size)]
		if !bytes.Equal(buf[:got], want) {
			t.Fatalf("ReadAt(len %d, off %d) returned %d bytes that differ from the sequential read", n, off, got)
		}
	}
}

func TestConcurrentReadersOfDifferentPartsAndEpochs(t *testing.T) {
	src := genSynthetic(t, 20000, 16, 4, 4, "clustered")
	m := startMount(t, src, smallFlags...)
	want := map[string][]byte{}
	type job struct{ e, i, k int }
	var jobs []job
	for j := range 8 {
		jobs = append(jobs, job{j % 3, j % 2, 2})
	}
	for _, j := range jobs {
		key := fmt.Sprint(j)
		if want[key] == nil {
			want[key] = m.read(j.e, j.i, j.k)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		wg.Go(func() {
			f, err := os.Open(m.part(j.e, j.i, j.k))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			// Small reads, so the readers interleave inside buffers.
			got, err := io.ReadAll(io.LimitReader(f, 1<<40))
			if err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, want[fmt.Sprint(j)]) {
				errs <- fmt.Errorf("reader of %v got different bytes", j)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// mixError is the largest difference, over consecutive windows of w records
// and over labels, between a label's share in the window and its overall
// share: 0 for a perfect mix, 1-1/C for a fully sorted order of C classes.
func mixError(labels []int64, classes, w int) float64 {
	total := make([]float64, classes)
	for _, l := range labels {
		total[l]++
	}
	var worst float64
	count := make([]float64, classes)
	for lo := 0; lo+w <= len(labels); lo += w {
		clear(count)
		for _, l := range labels[lo : lo+w] {
			count[l]++
		}
		for c := range classes {
			d := count[c]/float64(w) - total[c]/float64(len(labels))
			worst = max(worst, d, -d)
		}
	}
	return worst
}

func labelsOf(t *testing.T, b []byte) []int64 {
	t.Helper()
	var labels, v []int64
	for _, r := range frames(t, b) {
		f, ok, err := tfexample.Lookup(r, "label")
		if err != nil || !ok {
			t.Fatalf("record without a label: %v", err)
		}
		if v, err = f.AppendInt64s(v[:0]); err != nil || len(v) != 1 {
			t.Fatalf("bad label: %v", err)
		}
		labels = append(labels, v[0])
	}
	return labels
}

// TestCorgiPileMixesClusteredLabels checks the shuffle quality on data sorted
// by label (4 classes, 25% each). Measure: in every window of 1% of a part's
// records, each label's share must be within 0.2 of its global share. A
// buffer of 20% of the data holds about 140 random blocks of 4 KiB, so a
// label's share in a buffer has a standard deviation of about 0.04 around
// 25%, and a window of 1% (400 records) adds about 0.02: the worst of 20
// (buffer, label) pairs stays near 0.1. The source order (strategy none) has
// windows of a single label: an error of 0.75.
func TestCorgiPileMixesClusteredLabels(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	src := genSynthetic(t, 40000, 8, 4, 4, "clustered")
	for _, c := range []struct {
		strategy string
		wantMix  bool
	}{{"corgipile", true}, {"none", false}} {
		m := startMount(t, src, "--strategy", c.strategy, "--block-size", "4KiB", "--buffer", "20%", "--seed", "5")
		for e := range 2 {
			labels := labelsOf(t, m.read(e, 0, 1))
			got := mixError(labels, 4, len(labels)/100)
			if mixed := got <= 0.2; mixed != c.wantMix {
				t.Errorf("%s epoch %d: mix error %.3f, want mixed=%v (bound 0.2)", c.strategy, e, got, c.wantMix)
			}
		}
	}
}

func (m *mount) stats() api.Stats {
	m.t.Helper()
	b, err := os.ReadFile(api.StatsPath(m.dir))
	if err != nil {
		m.t.Fatalf("stats.json: %v\n%s", err, m.log)
	}
	var s api.Stats
	if err := json.Unmarshal(b, &s); err != nil {
		m.t.Fatalf("stats.json: %v\n%s", err, b)
	}
	return s
}

func TestManyOpenPartsStayWithinMaxMemory(t *testing.T) {
	src := genSynthetic(t, 30000, 16, 4, 4, "shuffled")
	const budget = 2 << 20
	m := startMount(t, src, "--block-size", "64KiB", "--buffer", "512KiB", "--max-memory", "2MiB", "--seed", "3")
	// 12 parts open at once, each wanting a 512 KiB buffer plus prefetch:
	// far more than the budget, so readers must take turns.
	const k = 12
	files := make([]*os.File, k)
	for i := range files {
		f, err := os.Open(m.part(0, i, k))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	var wg sync.WaitGroup
	var total int64
	var mu sync.Mutex
	for _, f := range files {
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := f.Read(buf)
				mu.Lock()
				total += int64(n)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	s := m.stats()
	// The slabs get --max-memory less the heap's estimate (memorySplit).
	if s.MemoryPeak > s.MemoryBudget || s.MemoryBudget > budget || s.MemoryBudget < budget/2 {
		t.Fatalf("peak memory %d bytes with a budget of %d (reported %d)", s.MemoryPeak, budget, s.MemoryBudget)
	}
	if s.MemoryPeak == 0 || total == 0 {
		t.Fatalf("nothing was read: peak %d, %d bytes", s.MemoryPeak, total)
	}
}

func TestSigtermWhileReadingExitsCleanly(t *testing.T) {
	src := genSynthetic(t, 20000, 32, 4, 2, "clustered")
	m := startMount(t, src, smallFlags...)
	f, err := os.Open(m.part(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	reading := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		close(reading)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	<-reading
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	m.stop() // SIGTERM, exit 0, no mount left: checked by stop
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("daemon took %v to exit", d)
	}
	f.Close()
	if t.Failed() {
		return
	}
	// The mount point is usable again.
	if err := os.WriteFile(filepath.Join(m.dir, "x"), nil, 0o644); err != nil {
		t.Fatalf("mount point not usable after exit: %v", err)
	}
	os.Remove(filepath.Join(m.dir, "x"))
}

func TestMountIsReadOnly(t *testing.T) {
	src := genSynthetic(t, 1000, 8, 2, 1, "clustered")
	m := startMount(t, src, smallFlags...)
	p := m.part(0, 0, 1)
	checks := map[string]error{}
	_, err := os.OpenFile(p, os.O_WRONLY, 0)
	checks["open for write"] = err
	checks["create"] = os.WriteFile(filepath.Join(m.dir, "epoch-0000", "new"), nil, 0o644)
	checks["unlink"] = os.Remove(p)
	checks["rename"] = os.Rename(p, p+".x")
	checks["chmod"] = os.Chmod(p, 0o777)
	checks["mkdir"] = os.Mkdir(filepath.Join(m.dir, "d"), 0o755)
	for op, err := range checks {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: got %v, want EROFS", op, err)
		}
	}
	for _, name := range []string{"epoch-x", "epoch--1", "epoch-1", "epoch-0000/part-00009-of-00008.tfrecord", "epoch-0000/part-0-of-1.tfrecord", "nope"} {
		if _, err := os.Stat(filepath.Join(m.dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %s: got %v, want ENOENT", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(m.dir, "epoch-12345", "part-00002-of-00007.tfrecord")); err != nil {
		t.Errorf("an unlisted epoch and K must resolve: %v", err)
	}
	out, _ := exec.Command("ls", m.dir).Output()
	if !bytes.Contains(out, []byte("epoch-0099")) || bytes.Contains(out, []byte("epoch-0100")) {
		t.Errorf("root should list epoch-0000..epoch-0099, got %s", out)
	}
}

func TestNextEpochsFirstBufferIsPrefetched(t *testing.T) {
	src := genSynthetic(t, 10000, 16, 4, 2, "clustered")
	m := startMount(t, src, smallFlags...)
	m.read(0, 0, 1)
	before := m.stats()
	f, err := os.Open(m.part(1, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	after := m.stats()
	if after.PrefetchHits <= before.PrefetchHits {
		t.Fatalf("first read of epoch 1 was not served by a prefetch: hits %d -> %d", before.PrefetchHits, after.PrefetchHits)
	}
}

func TestEqualPartsGivesEveryPartTheSameRecordCount(t *testing.T) {
	src := genSynthetic(t, 7000, 16, 4, 3, "clustered")
	want := sortedHashes(sourceRecords(t, src))
	m := startMount(t, src, append(smallFlags, "--parts", "3", "--equal-parts")...)
	var cfg struct {
		EqualParts bool `json:"equal_parts"`
		Padded     int  `json:"equal_parts_padding_epoch0"`
	}
	raw, _ := os.ReadFile(api.ConfigPath(m.dir))
	if err := json.Unmarshal(raw, &cfg); err != nil || !cfg.EqualParts {
		t.Fatalf("config.json: %v %s", err, raw)
	}
	var all [][32]byte
	counts := map[int]bool{}
	for i := range 3 {
		recs := frames(t, m.read(0, i, 3))
		counts[len(recs)] = true
		all = append(all, hashes(recs)...)
	}
	if len(counts) != 1 {
		t.Fatalf("parts hold %v records, want one count", counts)
	}
	if len(all) != len(want)+cfg.Padded || cfg.Padded == 0 {
		t.Fatalf("%d records served, %d in the source, config says %d padded", len(all), len(want), cfg.Padded)
	}
	distinct := slices.Compact(sortedHashes(all))
	if !slices.Equal(distinct, want) {
		t.Fatal("with padding, the epoch no longer holds every source record")
	}
}
