package tests

// Defaults that cannot silently degrade the shuffle (issue 17, item 2;
// issue 23): a buffer holds many blocks, or the user is told; more parts
// than blocks is said at mount and at order.

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/api"
)

func readBlockConfig(t *testing.T, m *mount) api.Config {
	t.Helper()
	b, err := os.ReadFile(api.ConfigPath(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	var c api.Config
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMountChoosesTheBlockSizeOnceBeforeIndexing mounts a 2.5 MB dataset
// without --block-size and --buffer. With 8 MiB blocks and a 5% buffer
// every buffer held one block (a block-only shuffle, silently); then the
// block size was lowered after a first index, which indexed twice. Now the
// rule of package sizing chooses both from the listing: one index, a buffer
// of the whole part (it fits in --max-memory), at least 256 blocks when the
// floor allows, and config.json and the log say why.
func TestMountChoosesTheBlockSizeOnceBeforeIndexing(t *testing.T) {
	src := genSynthetic(t, 20000, 16, 4, 4, "clustered")
	m := startMount(t, src, "--seed", "1", "--parts", "1")
	c := readBlockConfig(t, m)
	s := readSizing(t, m.dir)
	if s.Buffer != "100%" || s.Sizing == nil || !s.Sizing.WholePart || s.Sizing.BlockSizeGiven || s.Sizing.Reason == "" {
		t.Fatalf("config.json buffer %q, sizing %+v: want a whole part, chosen, with a reason", s.Buffer, s.Sizing)
	}
	if c.Dataset.Blocks < 256 || c.BlockSize > c.Dataset.Bytes/256 {
		t.Fatalf("%d blocks of %d bytes for %d bytes: want at least 256", c.Dataset.Blocks, c.BlockSize, c.Dataset.Bytes)
	}
	log := m.log.String()
	if n := strings.Count(log, `msg="index ready"`); n != 1 || !strings.Contains(log, `msg="block size and buffer"`) || strings.Contains(log, "level=WARN") {
		t.Fatalf("want one index, the choice logged, no warning:\n%s", log)
	}
}

// TestExplicitBlockSizeTooLargeForTheBufferWarns gives --block-size 1MiB and
// --buffer 10% for the same dataset: both are kept, and a warning names
// the blocks a buffer holds, the mix to expect and the flag that fixes it.
func TestExplicitBlockSizeTooLargeForTheBufferWarns(t *testing.T) {
	src := genSynthetic(t, 20000, 16, 4, 4, "clustered")
	m := startMount(t, src, "--seed", "1", "--block-size", "1MiB", "--buffer", "10%")
	if c := readSizing(t, m.dir); c.BlockSize != 1<<20 || c.Buffer != "10%" || c.Sizing == nil || !c.Sizing.BlockSizeGiven || !c.Sizing.BufferGiven || c.Sizing.Warning == "" {
		t.Fatalf("config.json block_size %d, buffer %s, sizing %+v: want the 1 MiB and 10%% given, and the warning", c.BlockSize, c.Buffer, c.Sizing)
	}
	// The buffer of 254 KiB holds 128 blocks of the 512-byte local floor:
	// the fix named is the smaller block.
	want := []string{"level=WARN", "too few blocks per buffer", "a total-variation distance of about", "use --block-size 1.0 KiB or less (or leave it out)", "blocks_per_buffer=1"}
	log, _ := m.logHas(want...)
	for _, want := range want {
		if !strings.Contains(log, want) {
			t.Fatalf("the mount log lacks %q:\n%s", want, log)
		}
	}
}

// TestMorePartsThanBlocksWarnsAtMountAndOrder asks for 16 parts of an
// 8-block set: half the parts of every epoch are empty (and with
// --equal-parts the epoch serves twice the dataset). Both mount and order
// must say so.
func TestMorePartsThanBlocksWarnsAtMountAndOrder(t *testing.T) {
	src := genSynthetic(t, 20000, 16, 4, 4, "clustered")
	flags := []string{"--seed", "1", "--block-size", "512KiB", "--parts", "16"}
	m := startMount(t, src, flags...)
	if c := readBlockConfig(t, m); c.Dataset.Blocks != 8 {
		t.Fatalf("%d blocks, want 8 (the test needs fewer blocks than parts)", c.Dataset.Blocks)
	}
	const warning = "--parts is larger than the number of blocks"
	if log, ok := m.logHas(warning, "parts=16 blocks=8"); !ok {
		t.Fatalf("mount does not warn of 16 parts for 8 blocks:\n%s", log)
	}
	_, stderr, code := run(append([]string{"order", src, "--part", "3", "--cache-dir", t.TempDir()}, flags...)...)
	if code != 0 || !strings.Contains(stderr, warning) || !strings.Contains(stderr, "parts=16 blocks=8") {
		t.Fatalf("order (exit %d) does not warn of 16 parts for 8 blocks:\n%s", code, stderr)
	}
	_, stderr, code = run(append([]string{"order", src, "--part", "3", "--equal-parts", "--cache-dir", t.TempDir()}, flags...)...)
	if code != 0 || !strings.Contains(stderr, warning) || !strings.Contains(stderr, "epoch_records=") || !strings.Contains(stderr, "dataset_records=20000") {
		t.Fatalf("order --equal-parts (exit %d) does not say what the epoch holds:\n%s", code, stderr)
	}
}

// TestServedPartsAreWithinOneBlockOfAnEqualShare stats the parts of a
// 16-file set whose files each end in a short block: every part must hold
// the dataset's bytes / K give or take one block (issue 17, item 4). Parts
// of equal block counts were up to 2.4 blocks off here (epoch 0, part 2 of
// 8: 407,269 bytes for a share of 652,936, with 100 KiB blocks).
func TestServedPartsAreWithinOneBlockOfAnEqualShare(t *testing.T) {
	src := genSynthetic(t, 40000, 16, 4, 16, "clustered")
	const block = 100 << 10 // files of 3.2 blocks; records are far smaller than a block
	for _, k := range []int{3, 8} {
		m := startMount(t, src, "--seed", "2", "--block-size", "100KiB", "--buffer", "10%", "--parts", fmt.Sprint(k))
		total := readBlockConfig(t, m).Dataset.Bytes
		for e := range 3 {
			var sum int64
			for i := range k {
				fi, err := os.Stat(m.part(e, i, k))
				if err != nil {
					t.Fatal(err)
				}
				sum += fi.Size()
				if d := int64(k)*fi.Size() - total; d > int64(k)*block || -d > int64(k)*block {
					t.Errorf("epoch %d part %d of %d holds %d bytes, want %d ± %d (bytes/K ± one block)", e, i, k, fi.Size(), total/int64(k), block)
				}
			}
			if sum != total {
				t.Fatalf("epoch %d: parts hold %d bytes, the dataset %d", e, sum, total)
			}
		}
		m.stop()
	}
}
