package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The traffic of issue 15: a node that reads only its part of a local or
// pls epoch through a disk cache of (1+Q) times its partition fetches from
// the source about Q of its partition per epoch after epoch 0.
//
// The source is a local directory standing in for shared storage: a part
// of 8 is about 48 blocks, fewer than the disk cache's write queue holds,
// so no fetched block is turned away unwritten (write_skipped, which a
// page-cached source could otherwise cause) and every fetch counted is one
// the cache's policy chose. The test checks write_skipped stays 0.

// entryAllowance is what a disk-cache entry may take beyond its block's
// bytes: the header and the key (source, path, version, offsets).
const entryAllowance = 256

// trafficMount mounts src for part 0 of 8 with a disk cache of (1+q) times
// that part's bytes (plus the entries' headers) and returns it with the
// part's bytes.
func trafficMount(t *testing.T, src string, q float64, flags ...string) (*mount, int64) {
	t.Helper()
	probe := startMount(t, src, flags...)
	fi, err := os.Stat(probe.part(0, 0, 8))
	if err != nil {
		t.Fatal(err)
	}
	part := fi.Size()
	probe.stop()
	blocks := part/(8<<10) + 1
	size := int64((1+q)*float64(part)) + int64((1+q)*float64(blocks)+1)*entryAllowance
	m := startMount(t, src, append(flags, "--disk-cache", filepath.Join(t.TempDir(), "dc"),
		"--disk-cache-size", fmt.Sprint(size))...)
	return m, part
}

// readEpochs reads part 0 of 8 of epochs 0 to n-1, waiting after each for
// the disk cache's writes, and returns the bytes fetched from the source
// per epoch (stats.json).
func readEpochs(t *testing.T, m *mount, n int) []int64 {
	t.Helper()
	for e := range n {
		m.read(e, 0, 8)
		m.settled()
	}
	st := m.settled()
	if d := st.DiskCache; d.WriteSkipped != 0 || d.PeakHeld > d.MaxBytes {
		t.Fatalf("disk cache: %+v: want no write turned away and a peak within max_bytes", *d)
	}
	fetched := make([]int64, n)
	for e := range n {
		fetched[e] = st.Epochs[e].SourceBytes
	}
	return fetched
}

func TestLocalStrategyWithADiskCacheOfItsPartitionFetchesNothingAfterEpochZero(t *testing.T) {
	src := genSynthetic(t, 6000, 120, 4, 4, "clustered")
	m, part := trafficMount(t, src, 0, "--seed", "5", "--block-size", "8KiB", "--strategy", "local", "--parts", "8")
	fetched := readEpochs(t, m, 4)
	// The prefetch that crosses into epoch 1 while epoch 0's last buffers
	// load may fetch a block both need first: it then counts to epoch 1,
	// and epoch 0 takes it from the cache. Every block is fetched once,
	// never again.
	if total := fetched[0] + fetched[1] + fetched[2] + fetched[3]; total != part {
		t.Fatalf("fetched %v, %d bytes in all; want the part's %d bytes, each block once", fetched, total, part)
	}
	if fetched[1] > part/4 {
		t.Errorf("epoch 1 fetched %d bytes, more than the prefetch crossing from epoch 0 can take", fetched[1])
	}
	for e := 2; e < 4; e++ {
		if fetched[e] != 0 {
			t.Errorf("epoch %d fetched %d bytes from the source, want 0: the disk cache holds the partition (%d bytes)\n%s", e, fetched[e], part, m.log)
		}
	}
}

func TestPLSWithADiskCacheOfOnePlusQPartitionsFetchesAboutQOfThePartitionPerEpoch(t *testing.T) {
	const q = 0.3
	src := genSynthetic(t, 6000, 120, 4, 4, "clustered")
	m, part := trafficMount(t, src, q, "--seed", "5", "--block-size", "8KiB", "--strategy", "pls",
		"--exchange", fmt.Sprint(q), "--parts", "8")
	fetched := readEpochs(t, m, 4)
	want := q * float64(part)
	for e := 1; e < 4; e++ {
		if r := float64(fetched[e]) / want; r < 0.8 || r > 1.2 {
			t.Errorf("epoch %d fetched %d bytes from the source, %.2f × Q·partition (%d bytes); want within 20%%", e, fetched[e], r, int64(want))
		}
	}
	t.Logf("fetched per epoch %v, Q·partition %d", fetched, int64(want))
}
