package tests

import (
	"encoding/json"
	"github.com/corgifs/corgifs/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tuneJSON is the part of `corgifs tune --json` the tests read.
type tuneJSON struct {
	Storage *struct {
		Sizes []struct {
			BlockSize int64   `json:"block_size"`
			MBps      float64 `json:"mb_per_s"`
			Skipped   string  `json:"skipped"`
		} `json:"sizes"`
		Recommended int64 `json:"recommended"`
		Smallest    int64 `json:"smallest"`
	} `json:"storage"`
	BlockSize int64 `json:"block_size"`
	Data      *struct {
		Blocks  int     `json:"blocks"`
		TV      float64 `json:"label_tv"`
		TVRand  float64 `json:"label_tv_random"`
		TVMax   float64 `json:"label_tv_max"`
		HD      float64 `json:"h_d"`
		Classes int     `json:"classes"`
	} `json:"data"`
	Buffer *struct {
		Criterion    string  `json:"criterion"`
		Blocks       int     `json:"blocks"`
		Of           int     `json:"of"`
		Percent      float64 `json:"percent"`
		Bound        float64 `json:"bound"`
		MixTV        float64 `json:"mix_tv"`
		BoundBlocks  int     `json:"bound_blocks"`
		BoundPercent float64 `json:"bound_percent"`
	} `json:"buffer"`
	Defaults *struct {
		Buffer    string  `json:"buffer"`
		Blocks    int     `json:"blocks"`
		WholePart bool    `json:"buffer_is_whole_part"`
		MixTV     float64 `json:"mix_tv"`
		Enough    bool    `json:"enough"`
		Reason    string  `json:"reason"`
	} `json:"defaults"`
	Mount string `json:"mount"`
}

func tuneRun(t *testing.T, args ...string) tuneJSON {
	t.Helper()
	out := corgifs(t, append([]string{"tune", "--json", "--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)...)
	var r tuneJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("tune --json: %v\n%s", err, out)
	}
	return r
}

// The same records sorted by label and shuffled: tune must see the sorted
// order as far more clustered (TV near its maximum, h_D many times the
// shuffled one's, which is about 1) and ask it for a larger buffer.
func TestTuneFindsAClusteredOrderFarMoreHeterogeneousAndAsksItABiggerBuffer(t *testing.T) {
	clustered := genSynthetic(t, 20000, 8, 4, 2, "clustered")
	shuffled := genSynthetic(t, 20000, 8, 4, 2, "shuffled")
	args := []string{"--label", "label", "--features", "features", "--block-size", "16KiB", "--probe=false"}
	c := tuneRun(t, append([]string{clustered}, args...)...)
	s := tuneRun(t, append([]string{shuffled}, args...)...)
	if c.Data == nil || s.Data == nil || c.Buffer == nil || s.Buffer == nil {
		t.Fatalf("no data report: %+v %+v", c, s)
	}
	t.Logf("clustered: %+v %+v; shuffled: %+v %+v", *c.Data, *c.Buffer, *s.Data, *s.Buffer)
	if c.Data.Classes != 4 || c.Data.TV < 0.7 || c.Data.TV < c.Data.TVMax-0.05 || s.Data.TV > 0.2 || s.Data.TV > 2*s.Data.TVRand {
		t.Errorf("label TV: clustered %.3f (max %.3f), shuffled %.3f (random-order baseline %.3f)", c.Data.TV, c.Data.TVMax, s.Data.TV, s.Data.TVRand)
	}
	if s.Data.HD > 1.5 || c.Data.HD < 10*s.Data.HD {
		t.Errorf("h_D: clustered %.2f, shuffled %.2f; want shuffled about 1 and clustered above 10 times it", c.Data.HD, s.Data.HD)
	}
	if c.Buffer.Percent <= s.Buffer.Percent || c.Buffer.Blocks <= s.Buffer.Blocks || c.Buffer.BoundBlocks <= s.Buffer.BoundBlocks ||
		c.Buffer.MixTV > 0.1 || s.Buffer.MixTV > 0.1 {
		t.Errorf("buffer: clustered %+v, shuffled %+v; want the clustered one larger by both rules, both mixing the labels to TV 0.1", *c.Buffer, *s.Buffer)
	}
	// The mount's own buffer is the whole part here (issue 23): enough,
	// so the mount line leaves --buffer out.
	if c.Defaults == nil || !c.Defaults.WholePart || !c.Defaults.Enough || c.Defaults.MixTV != 0 {
		t.Errorf("defaults: %+v, want a whole part, enough", c.Defaults)
	}
	if c.Mount != "corgifs mount "+clustered+" MNT --block-size 16KiB" {
		t.Errorf("mount line %q", c.Mount)
	}
}

// Without --block-size the data is cut at the block size the probe
// recommends, which is one it measured; the table names it. The files
// here are under 1 MiB, so the recommendation is the paper's smallest
// size within 10% of the best, not one of at least 1 MiB.
func TestTuneCutsTheDataAtTheProbedRecommendation(t *testing.T) {
	src := genSynthetic(t, 20000, 8, 4, 2, "clustered")
	r := tuneRun(t, src, "--label", "label", "--probe-bytes", "2MiB", "--max-block", "1MiB")
	if r.Storage == nil || len(r.Storage.Sizes) != 5 {
		t.Fatalf("storage report: %+v", r.Storage)
	}
	if r.BlockSize != r.Storage.Recommended || r.BlockSize != r.Storage.Smallest || r.BlockSize < 64<<10 || r.BlockSize >= 1<<20 {
		t.Errorf("block size %d, recommended %d", r.BlockSize, r.Storage.Recommended)
	}
	if r.Data == nil || r.Data.HD < 10 {
		t.Errorf("data: %+v (without --features, the bias gradient alone still shows the clustering)", r.Data)
	}
	text := corgifs(t, "tune", src, "--probe-bytes", "1MiB", "--max-block", "256KiB", "--cache-dir", filepath.Join(t.TempDir(), "c"))
	for _, want := range []string{"Storage: random reads of", "block size", "smallest within 10% of the best", "corgifs mount " + src + " MNT --block-size "} {
		if !strings.Contains(text, want) {
			t.Errorf("tune output lacks %q:\n%s", want, text)
		}
	}
}

// tune --max-memory reports the mix of the buffer a mount chooses at that
// budget, by the same rule (issue 23 item 4): at 2 MiB a part of 1.9 MiB
// no longer fits twice, so the default buffer is a share of it, which
// tune names with the reason config.json gives; its mount line carries
// the budget, and a mount of that line serves the buffer tune reported.
func TestTuneAtAGivenMaxMemoryReportsTheBufferTheMountChoosesThere(t *testing.T) {
	src := genSynthetic(t, 20000, 8, 4, 2, "clustered")
	args := []string{src, "--label", "label", "--block-size", "16KiB", "--probe=false", "--mix-tv", "0.15"}
	def := tuneRun(t, args...)
	if def.Defaults == nil || !def.Defaults.WholePart || def.Defaults.Buffer != "100%" {
		t.Fatalf("at the default --max-memory: defaults %+v, want a buffer of the whole part", def.Defaults)
	}
	r := tuneRun(t, append(args, "--max-memory", "2MiB")...)
	if r.Defaults == nil || r.Defaults.WholePart || r.Defaults.MixTV <= 0 || r.Defaults.Blocks >= def.Defaults.Blocks {
		t.Fatalf("at --max-memory 2MiB: defaults %+v, want a share of the part, fewer blocks than %d, a label TV above 0", r.Defaults, def.Defaults.Blocks)
	}
	want := "corgifs mount " + src + " MNT --block-size 16KiB --max-memory 2MiB"
	if !r.Defaults.Enough || r.Mount != want {
		t.Fatalf("mount line %q (defaults %+v), want %q: the budget, and no --buffer where the default mixes to --mix-tv", r.Mount, r.Defaults, want)
	}
	m := startMount(t, src, "--block-size", "16KiB", "--max-memory", "2MiB")
	c := readConfig(t, m)
	if c.Buffer != r.Defaults.Buffer || c.Sizing == nil || c.Sizing.WholePart || c.Sizing.Reason != r.Defaults.Reason {
		t.Errorf("the mount of tune's line serves buffer %q, sizing %+v; tune reported %q: %s", c.Buffer, c.Sizing, r.Defaults.Buffer, r.Defaults.Reason)
	}
}

func TestTuneHelpListsEveryFlagWithItsDefault(t *testing.T) {
	// The flag package prints the usage on stderr.
	b, err := exec.Command(bin, "tune", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("tune --help: %v\n%s", err, b)
	}
	out := string(b)
	for _, want := range []string{"-label", "-features", "-probe", "-probe-bytes", "-probe-time", "-in-flight", "-min-block",
		"-max-block", "-data-bytes", "-seed", "-json", "-block-size", "-cache-dir", "-max-memory", "(default 256 MiB)", "(default 10s)", "(default 1.0 GiB)",
		"-mix-tv", "(default 0.1)", "label mix", "(1-alpha)*h_D <= 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("tune --help lacks %q:\n%s", want, out)
		}
	}
}

// On Fashion-MNIST sorted by label, cut into 32 KiB blocks as in
// VALIDATION.md (1,568 blocks of about 38 records, by the cut rule at
// multiples of the block size; 1,584 when VALIDATION.md was measured, cut
// greedily), corgipile matched the
// full shuffle within a point at the last epoch with 2% and 10% buffers
// (2% fell 4-6 points behind in single epochs). The buffer tune recommends,
// by the label mix, must lie in that range (2% to 15%), while the paper's
// bound, printed as the guarantee, still asks for nearly everything; a
// shuffled Fashion-MNIST needs no more than the 16-block floor.
func TestTuneOnLabelSortedFashionMNISTRecommendsABufferWhereCorgipileMatchedFull(t *testing.T) {
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist"); err != nil {
		testenv.Missing(t, "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)")
	}
	dir := t.TempDir()
	corgifs(t, "gen", "fashion-mnist", filepath.Join(dir, "sorted"), "--order", "clustered", "--files", "8")
	corgifs(t, "gen", "fashion-mnist", filepath.Join(dir, "shuffled"), "--order", "shuffled", "--files", "8")
	args := []string{"--label", "label", "--features", "image", "--block-size", "32KiB", "--probe=false"}
	c := tuneRun(t, append([]string{filepath.Join(dir, "sorted", "train")}, args...)...)
	s := tuneRun(t, append([]string{filepath.Join(dir, "shuffled", "train")}, args...)...)
	t.Logf("sorted: %+v %+v; shuffled: %+v %+v", *c.Data, *c.Buffer, *s.Data, *s.Buffer)
	if c.Buffer.Of != 1568 || c.Data.TV < 0.85 || c.Data.HD < 20 || c.Data.HD > 38 {
		t.Errorf("sorted: %d blocks, TV %.3f, h_D %.2f; want 1568, TV > 0.85, 20 < h_D < 38", c.Buffer.Of, c.Data.TV, c.Data.HD)
	}
	if c.Buffer.Criterion != "mix" || c.Buffer.Percent < 2 || c.Buffer.Percent > 15 || c.Buffer.MixTV > 0.1 {
		t.Errorf("sorted: buffer %g%% by %q (TV %.3f), want the label mix's, between the 2%% and 10-15%% where corgipile matched full",
			c.Buffer.Percent, c.Buffer.Criterion, c.Buffer.MixTV)
	}
	if c.Buffer.BoundPercent < 90 || c.Buffer.BoundBlocks <= c.Buffer.Blocks {
		t.Errorf("sorted: the bound asks for %d blocks (%g%%), want nearly all of them", c.Buffer.BoundBlocks, c.Buffer.BoundPercent)
	}
	// A mount's default buffer of this set is the whole part: the mount
	// line needs no --buffer (issue 23). Where the default buffer is not a
	// whole part, the line gives --buffer only when the measured mix asks
	// for more (tune's TestDefaultsAdviceSaysWhetherTheMountsOwnBufferIsEnough).
	if strings.Contains(c.Mount, "--buffer") || c.Defaults == nil || !c.Defaults.Enough {
		t.Errorf("sorted: mount line %q with defaults %+v: want the mount's own buffer", c.Mount, c.Defaults)
	}
	if s.Data.HD > 1.3 || s.Buffer.Percent > 2 || s.Buffer.Blocks != 16 {
		t.Errorf("shuffled: h_D %.2f, buffer %g%% (%d blocks); want about 1 and the 16-block floor", s.Data.HD, s.Buffer.Percent, s.Buffer.Blocks)
	}
	text := corgifs(t, append([]string{"tune", "--cache-dir", filepath.Join(dir, "cache"), filepath.Join(dir, "sorted", "train")}, args...)...)
	for _, want := range []string{"buffer label TV", "chosen by the label mix", "bound, (1-alpha)*h_D <= 1, the guarantee:", "1514 of 1568 blocks per buffer, --buffer 100%"} {
		if !strings.Contains(text, want) {
			t.Errorf("tune output lacks %q:\n%s", want, text)
		}
	}
	c0 := tuneRun(t, append([]string{filepath.Join(dir, "sorted", "train"), "--mix-tv", "0"}, args...)...)
	if c0.Buffer.Criterion != "bound" || c0.Buffer.Percent != c.Buffer.BoundPercent {
		t.Errorf("--mix-tv 0: buffer %g%% by %q, want the bound's %g%%", c0.Buffer.Percent, c0.Buffer.Criterion, c.Buffer.BoundPercent)
	}
}

// A mount reads blocks under 1 MiB through the page cache, not at the
// speed direct reads measure, so the block tune recommends is at least
// 1 MiB wherever the files are that large, unless --direct-io=false.
func TestTuneRecommendsABlockTheMountReadsDirectly(t *testing.T) {
	src := genSynthetic(t, 40000, 8, 4, 1, "clustered")
	r := tuneRun(t, src, "--probe-bytes", "4MiB", "--max-block", "2MiB")
	if r.Storage == nil || r.Storage.Recommended < 1<<20 || r.BlockSize != r.Storage.Recommended {
		t.Errorf("recommended %+v, block size %d: want at least 1 MiB", r.Storage, r.BlockSize)
	}
	r = tuneRun(t, src, "--probe-bytes", "4MiB", "--max-block", "2MiB", "--direct-io=false")
	if r.Storage == nil || r.Storage.Recommended != r.Storage.Smallest {
		t.Errorf("--direct-io=false: recommended %+v, want the smallest within 10%% of the best", r.Storage)
	}
}
