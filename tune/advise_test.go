package tune

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/mount"
)

func adviseConfig(src, cacheDir string) Config {
	m := mount.Defaults()
	m.Source, m.CacheDir = src, cacheDir
	return Config{Mount: m, Label: "label", Probe: false, ProbeBytes: 1 << 20, ProbeTime: time.Second, InFlight: 8, Rounds: 1,
		MinBlock: 64 << 10, MaxBlock: 256 << 10, DataBytes: 1 << 30, Seed: 1, Parts: 1, MixTV: 0.1}
}

// Every setting that cannot work is refused before anything is read, as
// a *mount.OptionError naming it.
func TestAdviseRefusesBadSettingsAsOptionErrors(t *testing.T) {
	cases := []struct {
		change func(*Config)
		option string
		text   string
	}{
		{func(c *Config) { c.Label, c.Features = "", "x" }, "features", "--features needs --label"},
		{func(c *Config) { c.Label, c.Probe = "", false }, "probe", "nothing to measure: --probe=false and no --label"},
		{func(c *Config) { c.MinBlock = 1 << 20 }, "min-block", "--min-block 1.0 MiB is larger than --max-block 256 KiB"},
		{func(c *Config) { c.Parts = 0 }, "parts", "--parts 0: want at least 1"},
		{func(c *Config) { c.MixTV = 1 }, "mix-tv", "--mix-tv 1: want at least 0"},
		{func(c *Config) { c.Rounds = 0 }, "in-flight", "--in-flight 8, --rounds 0: want at least 1"},
	}
	for _, tc := range cases {
		c := adviseConfig("/nonexistent", "/nonexistent-cache")
		tc.change(&c)
		_, err := Advise(context.Background(), c, nil)
		var oe *mount.OptionError
		if !errors.As(err, &oe) || oe.Option != tc.option || !strings.Contains(oe.Text("--"), tc.text) {
			t.Errorf("err = %v, want the OptionError of %s saying %q", err, tc.option, tc.text)
		}
	}
}

// On a source sorted by label, Advise measures the clustering at the
// block size a mount would choose and gives the mount line of it: with
// --parts, and without --buffer when the mount's own buffer (a whole
// part of this small set) mixes enough.
func TestAdviseMeasuresTheDataAndGivesTheMountLine(t *testing.T) {
	src := t.TempDir()
	if _, err := (datagen.Synthetic{Records: 4000, Features: 8, Classes: 4, Files: 4, Seed: 1, Clustered: true}).Write(context.Background(), src, nil); err != nil {
		t.Fatal(err)
	}
	c := adviseConfig(src, t.TempDir())
	c.Parts = 2
	a, err := Advise(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Storage != nil || a.Data == nil || a.Data.Records != 4000 || a.Data.Classes != 4 || a.BlockSize == 0 {
		t.Fatalf("advice %+v, data %+v: want no storage probe and the 4000 records of 4 classes analysed", a, a.Data)
	}
	if a.Data.LabelTV <= a.Data.LabelTVShuf {
		t.Errorf("label TV %g, random order %g: a sorted source must be more clustered", a.Data.LabelTV, a.Data.LabelTVShuf)
	}
	if a.Buffer == nil || a.Defaults == nil || !a.Defaults.WholePart || !a.Defaults.Enough {
		t.Errorf("buffer %+v defaults %+v: want the advice and the mount's whole-part buffer, enough", a.Buffer, a.Defaults)
	}
	if want := "corgifs mount " + src + " MNT --block-size " + FlagSize(a.BlockSize) + " --parts 2"; a.Mount != want {
		t.Errorf("mount line %q, want %q", a.Mount, want)
	}
}
