package validate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/validator"
)

// config returns a Config of a small synthetic training and test set,
// split in files, read in-process.
func config(t *testing.T) Config {
	t.Helper()
	train := datagen.Synthetic{Records: 2000, Features: 8, Classes: 4, Files: 4, Seed: 5, Clustered: true}
	test := datagen.Synthetic{Records: 400, Features: 8, Classes: 4, Files: 1, Seed: 5, FirstID: 2000}
	data, testDir := t.TempDir(), t.TempDir()
	for dir, s := range map[string]datagen.Synthetic{data: train, testDir: test} {
		if _, err := s.Write(context.Background(), dir, nil); err != nil {
			t.Fatal(err)
		}
	}
	m := mount.Defaults()
	m.CacheDir = t.TempDir()
	m.MaxMemory = 64 << 20
	m.Seed, m.SeedGiven = 7, true
	return Config{Mount: m, Data: data, Test: testDir, Model: validator.Softmax, Strategies: []string{"none"},
		Epochs: 2, Batch: 16, LR: 0.05, Decay: validator.DefaultDecay, SketchDim: 16, Via: ViaDirect}
}

// Every option that cannot work is refused as a *mount.OptionError naming
// it, before the data is read: a CLI writes {option} as its flag.
func TestRunRefusesBadOptionsAsOptionErrorsBeforeReadingTheData(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Config)
		option string
		text   string
	}{
		{"unknown via", func(c *Config) { c.Via = "nfs" }, "via", `--via "nfs": want mount, direct or files`},
		{"unknown strategy", func(c *Config) { c.Strategies = []string{"none", "bogus"} }, "strategies", `unknown strategy "bogus" in --strategies`},
		{"Q of another strategy", func(c *Config) { c.Strategies = []string{"corgipile:0.3"} }, "strategies", "only pls takes an exchange fraction"},
		{"Q out of range", func(c *Config) { c.Strategies = []string{"pls:2"} }, "strategies", `"pls:2" in --strategies: want a fraction Q`},
		{"partition unused", func(c *Config) { c.Mount.Partition = shuffler.PartitionContiguous }, "partition", "--strategies none has none of them"},
		{"exchange unused", func(c *Config) { c.Strategies, c.Mount.ExchangeGiven = []string{"pls:0.2"}, true }, "exchange", "has no pls without its own pls:Q"},
		{"batch not a multiple", func(c *Config) { c.Workers, c.Batch = 3, 64 }, "batch", "--batch 64 is not a multiple of --workers 3: every step takes --batch/K records of each part (try --batch 63)"},
		{"negative sync", func(c *Config) { c.SyncEvery = -1 }, "sync-every", "--sync-every -1: want 0"},
		{"sync of one worker", func(c *Config) { c.SyncEvery = 2 }, "sync-every", "pass --workers K with K > 1"},
		{"sketch of zero", func(c *Config) { c.Strategies, c.SketchDim = []string{"grab"}, 0 }, "sketch-dim", "--sketch-dim 0: want at least 1"},
		{"balance rule unused", func(c *Config) { c.Mount.BalanceRuleGiven = true }, "balance-rule", "--balance-rule applies to the strategies grab"},
		{"feedback timeout unused", func(c *Config) { c.Mount.FeedbackTimeoutGiven = true }, "feedback-timeout", "--feedback-timeout applies"},
		{"files in an order", func(c *Config) { c.Via, c.Strategies = ViaFiles, []string{"corgipile"} }, "via", "pass --strategies none (got corgipile)"},
		{"files as parts", func(c *Config) { c.Via, c.Workers, c.Batch = ViaFiles, 2, 64 }, "workers", "--workers 2 needs --via mount or direct"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Mount: mount.Defaults(), Data: "/nonexistent/data", Test: "/nonexistent/test", Model: validator.Softmax,
				Strategies: []string{"none"}, Epochs: 1, Batch: 64, SketchDim: 16, Via: ViaDirect}
			tc.change(&c)
			_, err := Run(context.Background(), c, nil)
			var oe *mount.OptionError
			if !errors.As(err, &oe) {
				t.Fatalf("err = %v, want a *mount.OptionError", err)
			}
			if oe.Option != tc.option || !strings.Contains(oe.Text("--"), tc.text) {
				t.Errorf("option %q, %q; want option %q and a text containing %q", oe.Option, oe.Text("--"), tc.option, tc.text)
			}
		})
	}
}

// An in-process run trains every strategy, its feedback strategies
// through a real feedback store, and says which block size and buffer a
// mount's rule chose.
func TestDirectRunTrainsEveryStrategyAndGivesFeedbackToTheStore(t *testing.T) {
	c := config(t)
	c.Strategies = []string{"none", "corgipile", "pls:0.2", "grab"}
	c.Workers = 2
	res, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, r := range res.Report.Runs {
		labels = append(labels, r.Strategy)
		if len(r.Epochs) != c.Epochs {
			t.Errorf("%s: %d epochs, want %d", r.Strategy, len(r.Epochs), c.Epochs)
		}
	}
	if got := strings.Join(labels, ","); got != "none,corgipile,pls:0.2,grab" {
		t.Errorf("runs %s", got)
	}
	fb := res.Report.Runs[3].Feedback
	if fb == nil || fb.Accepted != int64(c.Epochs*c.Workers) || fb.Refused != 0 {
		t.Errorf("grab's feedback: %+v, want %d files accepted and none refused", fb, c.Epochs*c.Workers)
	}
	if res.Sizes == nil || res.Sizes.BlockSize == 0 {
		t.Errorf("sizes %+v: want the block size the rule chose", res.Sizes)
	}
}

// Strategy none read in-process from the index serves the records in
// source order, as reading the files in their order does: both train
// the same model.
func TestDirectNoneTrainsLikeTheFilesInTheirOrder(t *testing.T) {
	c := config(t)
	direct, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Via = ViaFiles
	files, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if files.Sizes != nil {
		t.Errorf("files: sizes %+v, want none (no index)", files.Sizes)
	}
	for e := range c.Epochs {
		d, f := direct.Report.Runs[0].Epochs[e], files.Report.Runs[0].Epochs[e]
		if d.TrainLoss != f.TrainLoss || d.TestAcc != f.TestAcc {
			t.Errorf("epoch %d: direct loss %g acc %g, files loss %g acc %g", e, d.TrainLoss, d.TestAcc, f.TrainLoss, f.TestAcc)
		}
	}
}

// A run through a mount asks the Mounter for the mount a user would run:
// the run's strategy and seed, the format's file names, the parts, the
// partition and the exchange of pls, the feedback dimension of the
// vectors; and what was not given (the block size, the buffer) is left
// for the mount to choose.
func TestMountRunAsksTheMounterForTheRunsMount(t *testing.T) {
	c := config(t)
	c.Via = ViaMount
	c.Strategies = []string{"local", "pls:0.4", "grab"}
	c.Workers = 2
	stop := errors.New("mount refused by the test")
	var got []mount.Config
	c.Mounter = func(_ context.Context, m mount.Config, work string) (*Mounted, error) {
		got = append(got, m)
		return nil, stop
	}
	for _, s := range c.Strategies {
		c1 := c
		c1.Strategies = []string{s}
		if _, err := Run(context.Background(), c1, nil); !errors.Is(err, stop) {
			t.Fatalf("%s: err = %v, want the Mounter's", s, err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d mounts asked for, want 3", len(got))
	}
	for i, m := range got {
		if m.Source != c.Data || m.Seed != 7 || !m.SeedGiven || m.Parts != 2 || m.Epochs != c.Epochs ||
			strings.Join(m.Include, ",") != "*.tfrecord,*.tfrecords" || m.BlockSize != 0 || m.Buffer != (shuffler.BufferSize{}) {
			t.Errorf("mount %d: %+v", i, m)
		}
	}
	if got[0].Strategy != "local" || got[0].Partition != shuffler.PartitionRandom {
		t.Errorf("local: strategy %s partition %q, want local and random", got[0].Strategy, got[0].Partition)
	}
	if got[1].Strategy != "pls" || got[1].Exchange != 0.4 || !got[1].ExchangeGiven {
		t.Errorf("pls:0.4: strategy %s exchange %g (given %v)", got[1].Strategy, got[1].Exchange, got[1].ExchangeGiven)
	}
	if got[2].Strategy != "grab" || got[2].FeedbackDim != 16 || got[2].CacheDir == c.Mount.CacheDir {
		t.Errorf("grab: feedback dim %d, cache dir %s: want the sketch's 16 and a directory of the run's own", got[2].FeedbackDim, got[2].CacheDir)
	}
}
