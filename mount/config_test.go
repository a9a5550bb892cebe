package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
)

// config is a Config that passes Check, of a local source.
func config(t *testing.T) Config {
	c := Defaults()
	c.Source = t.TempDir()
	c.CacheDir = t.TempDir()
	return c
}

func TestDefaultsPassCheck(t *testing.T) {
	c := config(t)
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckNamesTheOptionThatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		option string
		set    func(*Config)
		want   string // in the message, as a CLI writes it
	}{
		{"strategy", func(c *Config) { c.Strategy = "corgipil" }, `unknown strategy "corgipil" (choose one of`},
		{"index", func(c *Config) { c.Index = "fast" }, `--index "fast": want full or probe`},
		{"parts", func(c *Config) { c.Parts = 0 }, "--parts 0: want 1 to"},
		{"epochs", func(c *Config) { c.Epochs = -1 }, "--epochs must be >= 0"},
		{"max-memory", func(c *Config) { c.MaxMemory = 0 }, "--max-memory 0"},
		{"cache-dir", func(c *Config) { c.CacheDir = "" }, "--cache-dir is empty"},
		{"partition", func(c *Config) { c.Partition = "contiguous" }, "--partition applies to --strategy local, pls, grab and cdgrab only (the set each part keeps); --strategy corgipile has no partition"},
		{"exchange", func(c *Config) { c.Strategy, c.ExchangeGiven = "local", true }, "--exchange applies to --strategy pls only (local is pls with --exchange 0); --strategy local exchanges nothing"},
		{"balance-rule", func(c *Config) { c.BalanceRuleGiven = true }, "--balance-rule applies to --strategy grab, cdgrab and corgipile-balance only, not corgipile"},
		{"feedback-timeout", func(c *Config) { c.FeedbackTimeoutGiven = true }, "--feedback-timeout applies to"},
		{"coordinate", func(c *Config) { c.Coordinate, c.CoordinateRank = "/shared", 0 }, "--coordinate applies to --strategy grab, cdgrab and corgipile-balance only, not corgipile"},
		{"coordinate-rank", func(c *Config) { c.CoordinateRank = 1 }, "--coordinate-rank 1 needs --coordinate DIR"},
		{"coordinate-rank", func(c *Config) { c.Strategy, c.Coordinate = "grab", "/shared" }, "--coordinate /shared needs --coordinate-rank N"},
		{"coordinate", func(c *Config) { c.Strategy, c.Coordinate, c.CoordinateRank = "grab", "gs://b/p", 0 }, "want a directory or s3://bucket/prefix"},
		{"feedback-dim", func(c *Config) { c.Strategy, c.FeedbackDim = "grab", 0 }, "--feedback-dim 0: want at least 1"},
		{"feedback-group", func(c *Config) { c.FeedbackGroup = "wheel" }, "--feedback-group wheel applies to the feedback strategies"},
		{"feedback-group", func(c *Config) { c.Strategy, c.FeedbackGroup = "grab", "wheel" }, "--feedback-group wheel needs --allow-other"},
	} {
		c := config(t)
		tc.set(&c)
		err := c.Check()
		var oe *OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%s: Check() = %v, want an *OptionError", tc.option, err)
			continue
		}
		if oe.Option != tc.option {
			t.Errorf("Check() names option %q, want %q (%v)", oe.Option, tc.option, err)
		}
		if got := oe.Text("--"); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q does not say %q", tc.option, got, tc.want)
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("%s: Error() %q names a flag; the library's message names options as placeholders, {%s}", tc.option, err, tc.option)
		}
	}
}

func TestCheckTakesTheFeedbackOptionsOfFeedbackStrategies(t *testing.T) {
	c := config(t)
	c.Strategy, c.Coordinate, c.CoordinateRank, c.BalanceRuleGiven, c.FeedbackTimeoutGiven = "cdgrab", t.TempDir(), 0, true, true
	c.AllowOther, c.FeedbackGroup = true, "0"
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if g, err := c.FeedbackGID(); err != nil || g == nil || *g != 0 {
		t.Errorf("FeedbackGID() = %v, %v; want 0", g, err)
	}
}

func TestOpenChecksTheOptionsBeforeReadingTheSource(t *testing.T) {
	// A typo in the strategy is reported as such, not as the missing
	// source that indexing would find first.
	c := config(t)
	c.Source = filepath.Join(t.TempDir(), "no-such-dir")
	c.Strategy = "corgipil"
	_, err := Open(context.Background(), c, nil)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "strategy" {
		t.Fatalf("Open() = %v, want the strategy's OptionError", err)
	}
	if ents, _ := os.ReadDir(c.CacheDir); len(ents) > 0 {
		t.Errorf("Open wrote %d entries to the cache directory before refusing the options", len(ents))
	}
}

func TestProbeModeProbesRemoteSourcesUnlessEveryRecordIsNeeded(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"local", func(c *Config) {}, index.IndexFull},
		{"s3", func(c *Config) { c.Source = "s3://bucket/prefix" }, index.IndexProbe},
		{"s3 given full", func(c *Config) { c.Source, c.Index = "s3://bucket/prefix", index.IndexFull }, index.IndexFull},
		{"local given probe", func(c *Config) { c.Index = index.IndexProbe }, index.IndexProbe},
		{"s3 skip corrupt", func(c *Config) { c.Source, c.SkipCorrupt = "s3://b/p", true }, index.IndexFull},
		{"s3 record strategy", func(c *Config) { c.Source, c.Strategy = "s3://b/p", "full" }, index.IndexFull},
		{"s3 feedback strategy", func(c *Config) { c.Source, c.Strategy = "s3://b/p", "corgipile-balance" }, index.IndexFull},
		{"s3 equal parts", func(c *Config) { c.Source, c.EqualParts = "s3://b/p", true }, index.IndexFull},
		{"s3 listing every record", func(c *Config) { c.Source, c.ListsRecords = "s3://b/p", true }, index.IndexFull},
	} {
		c := config(t)
		tc.set(&c)
		if got := c.ProbeMode(); got != tc.want {
			t.Errorf("%s: ProbeMode() = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestOpenChoosesSizesIndexesAndPlansALocalDataset(t *testing.T) {
	c := config(t)
	var b strings.Builder
	for i := range 2000 {
		b.WriteString(`{"i": ` + strings.Repeat("1", 1+i%7) + "}\n")
	}
	if err := os.WriteFile(filepath.Join(c.Source, "a.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := formats.Lookup("jsonl", formats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Format = f
	c.MaxMemory = 64 << 20
	ds, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if ds.Index.Records != 2000 {
		t.Errorf("index holds %d records, want 2000", ds.Index.Records)
	}
	if ds.Config.BlockSize == 0 || ds.Config.Buffer.Bytes == 0 && ds.Config.Buffer.Percent == 0 {
		t.Errorf("block size %d and buffer %v: want both chosen", ds.Config.BlockSize, ds.Config.Buffer)
	}
	if !ds.SeedChosen || !ds.Config.SeedGiven {
		t.Error("no seed given: want one chosen and kept in Config")
	}
	if info := ds.SizingInfo(); info.BlockSizeGiven || info.BufferGiven || info.Reason == "" {
		t.Errorf("SizingInfo() = %+v: want both chosen, with a reason", info)
	}
	if est := (8+tableBytes)*ds.Index.Records + index.BlockHeapBytes*int64(len(ds.Index.Blocks)); ds.SlabBudget > c.MaxMemory || c.MaxMemory-ds.SlabBudget > est {
		t.Errorf("slabs %d of a small index, want max memory %d less at most %d", ds.SlabBudget, c.MaxMemory, est)
	}
	p, err := ds.Planner.Plan(0, 0, 1)
	if err != nil || p.Records != 2000 {
		t.Errorf("plan of epoch 0: %d records, %v; want 2000", p.Records, err)
	}
}

func TestOpenRefusesMaxMemoryBelowTheLargestBlock(t *testing.T) {
	c := config(t)
	line := `{"x": "` + strings.Repeat("y", 1<<20) + "\"}\n"
	if err := os.WriteFile(filepath.Join(c.Source, "a.jsonl"), []byte(strings.Repeat(line, 3)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.MaxMemory, c.BlockSize = 512<<10, 4<<10
	_, err := Open(context.Background(), c, nil)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "max-memory" || !strings.Contains(oe.Text("--"), "use at least --max-memory") {
		t.Fatalf("Open() = %v, want max-memory's OptionError naming the smallest that works", err)
	}
}

func TestOpenIndexBuildsTheIndexAMountOfTheSameConfigFinds(t *testing.T) {
	c := config(t)
	line := `{"x": 1}` + "\n"
	if err := os.WriteFile(filepath.Join(c.Source, "a.jsonl"), []byte(strings.Repeat(line, 500)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Strategy = "" // corgifs index has no strategy
	bad := c
	bad.Index = "fast"
	if _, err := OpenIndex(context.Background(), bad, nil); err == nil {
		t.Fatal("OpenIndex took index mode fast")
	}
	ix, err := OpenIndex(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ix.Cached || ix.Index.Records != 500 || ix.Planner != nil {
		t.Fatalf("OpenIndex: cached %v, %d records, planner %v; want a fresh index of 500 and no planner", ix.Cached, ix.Index.Records, ix.Planner)
	}
	c.Strategy = "corgipile"
	ds, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if !ds.Cached || ds.Config.BlockSize != ix.Config.BlockSize {
		t.Errorf("Open after OpenIndex: cached %v, block size %d (index's %d); want the sidecar at the same size", ds.Cached, ds.Config.BlockSize, ix.Config.BlockSize)
	}
}
