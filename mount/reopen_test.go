package mount

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/shuffler"
)

// Reopen over an opened index makes what Open makes of the same Config:
// the same buffer, memory split and plans, and a loader that serves the
// plan's bytes; and it refuses what Open refuses.
func TestReopenMakesTheDatasetOpenWouldOverTheSameIndex(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	if _, err := (datagen.Synthetic{Records: 3000, Features: 8, Classes: 4, Files: 3, Seed: 1}).Write(ctx, src, nil); err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	c.Source, c.CacheDir, c.MaxMemory, c.Parts, c.Seed, c.SeedGiven = src, t.TempDir(), 64<<20, 2, 9, true
	base, err := OpenIndex(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	for _, strategy := range []string{"corgipile", "window", "pls", "grab"} {
		t.Run(strategy, func(t *testing.T) {
			rc := c
			rc.Strategy = strategy
			rc.CacheDir = t.TempDir()
			opened, err := Open(ctx, rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer opened.Close()
			rc.CacheDir = t.TempDir()
			re, err := base.Reopen(rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer re.Close()
			if re.Config.Buffer != opened.Config.Buffer || re.SlabBudget != opened.SlabBudget || re.HeapLimit != opened.HeapLimit ||
				re.Config.BlockSize != opened.Config.BlockSize || (re.Feedback == nil) != (opened.Feedback == nil) {
				t.Errorf("reopened: buffer %v slabs %d heap %d block %d feedback %v; opened: %v %d %d %d %v",
					re.Config.Buffer, re.SlabBudget, re.HeapLimit, re.Config.BlockSize, re.Feedback != nil,
					opened.Config.Buffer, opened.SlabBudget, opened.HeapLimit, opened.Config.BlockSize, opened.Feedback != nil)
			}
			a, err := re.Planner.Plan(0, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			b, err := opened.Planner.Plan(0, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(re.Planner.RecordIDs(a), opened.Planner.RecordIDs(b)) {
				t.Errorf("part 1 of 2 of epoch 0 serves other records than Open's planner")
			}
			s := shuffler.NewStream(re.Planner, re.NewLoader(), a)
			defer s.Close()
			buf := make([]byte, s.Size())
			if n, err := s.ReadAt(ctx, buf, 0); int64(n) != s.Size() || (err != nil && err != io.EOF) {
				t.Errorf("read %d of %d bytes of the part: %v", n, s.Size(), err)
			}
		})
	}
	rc := c
	rc.BalanceRuleGiven = true
	var oe *OptionError
	if _, err := base.Reopen(rc, nil); !errors.As(err, &oe) || oe.Option != "balance-rule" {
		t.Errorf("a balance rule with corgipile: err = %v, want the OptionError of balance-rule", err)
	}
}
