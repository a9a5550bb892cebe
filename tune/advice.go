package tune

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/option"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
	"github.com/corgifs/corgifs/source"
)

// DefaultsMix is the label mix of the buffer a mount chooses when given
// the mount line's --block-size and no --buffer (package sizing).
type DefaultsMix struct {
	Buffer    string `json:"buffer"`
	Blocks    int    `json:"blocks"` // blocks of a buffer
	WholePart bool   `json:"buffer_is_whole_part"`
	// MixTV is the expected label TV of such a buffer, from the measured
	// label mix; Enough says it meets --mix-tv (or the bound's blocks,
	// with --mix-tv 0), or that a buffer is a whole part: the mount line
	// then has no --buffer.
	MixTV  float64 `json:"mix_tv"`
	Enough bool    `json:"enough"`
	// Reason is sizing's, its options written as the flags of the mount
	// line (--max-memory), as config.json's.
	Reason string `json:"reason"`
}

// DefaultsAdvice measures the mix of the buffer the mount would choose for
// blocks of block bytes, of a source in an object store or not, within
// maxMemory.
func DefaultsAdvice(objectStore bool, maxMemory int64, rep DataReport, ix *index.Index, block int64, parts int, maxTV float64, advice *BufferChoice) *DefaultsMix {
	c := sizing.Choose(sizing.Input{DatasetBytes: ix.Bytes, Parts: parts, ObjectStore: objectStore,
		MaxMemory: maxMemory, BlockSize: block})
	blocks := len(ix.Blocks) / max(1, parts)
	if !c.WholePart && len(ix.Blocks) > 0 {
		blocks = int(c.BufferBytes / max(1, ix.Bytes/int64(len(ix.Blocks))))
	}
	m := &DefaultsMix{Buffer: c.Buffer.String(), Blocks: blocks, WholePart: c.WholePart, Reason: option.Render(c.Reason, "--")}
	if rep.Mix != nil {
		m.MixTV = rep.Mix.ExpectedTV(blocks)
	}
	switch {
	case c.WholePart:
		m.Enough = true
	case maxTV > 0 && rep.Mix != nil:
		m.Enough = m.MixTV <= maxTV
	case advice != nil:
		m.Enough = blocks >= advice.Blocks
	}
	return m
}

// BufferChoice is the buffer of the mount line, what each rule asks
// for, and both rules' figures at a few common buffer sizes.
type BufferChoice struct {
	// Criterion is the rule that chose the mount line's buffer: "mix"
	// (the label mix, --mix-tv) or "bound" ((1-alpha)*h_D <= 1).
	Criterion string `json:"criterion"`
	Blocks    int    `json:"blocks"` // n: blocks per buffer the criterion asks for
	Of        int    `json:"of"`     // N: blocks of the dataset
	Part      int    `json:"part"`   // blocks of a part: N/K
	// Percent is the --buffer of the mount line, in percent of a part:
	// one whose balanced buffers hold at least Blocks blocks, and at
	// least MinBufferBlocks (see BufferPercent).
	Percent float64 `json:"percent"`
	Bytes   int64   `json:"bytes"`  // of a buffer of Percent, with --parts 1
	Bound   float64 `json:"bound"`  // (1-alpha)*h_D at Blocks
	MixTV   float64 `json:"mix_tv"` // expected buffer label TV at Blocks
	// MaxTV is --mix-tv, MixBlocks the fewest blocks (at least
	// MinBufferBlocks) whose expected buffer TV is at most MaxTV.
	MaxTV     float64 `json:"mix_tv_max"`
	MixBlocks int     `json:"mix_blocks"`
	// BoundBlocks is the fewest blocks meeting the bound, BoundPercent
	// the --buffer that asks for them.
	BoundBlocks  int          `json:"bound_blocks"`
	BoundPercent float64      `json:"bound_percent"`
	At           []BoundPoint `json:"at"`
}

// MinBufferBlocks is the fewest blocks a buffer should hold whatever the
// rules say: fewer hardly shuffle, and a mount lowers the block size (or
// warns) below it.
const MinBufferBlocks = 16

type BoundPoint struct {
	Percent float64 `json:"percent"`
	Blocks  int     `json:"blocks"`
	Bound   float64 `json:"bound"`
	MixTV   float64 `json:"mix_tv"`
}

// BufferAdvice applies the label mix rule (maxTV > 0) or the bound (maxTV
// 0) to the dataset of ix served in parts parts.
func BufferAdvice(rep DataReport, ix *index.Index, parts int, maxTV float64) (*BufferChoice, error) {
	all := rep.BlocksInAll
	// A buffer is drawn from a part's blocks. A part of corgipile's is a
	// random share of them, so n of its blocks mix the labels as n blocks
	// of the dataset do: the mix rule asks for n blocks whatever the parts.
	// The bound's alpha is about drawing without replacement from what a
	// buffer is drawn from: a part.
	part := max(1, all/max(parts, 1))
	c := &BufferChoice{Of: all, Part: part, MaxTV: maxTV, BoundBlocks: NeededBlocks(rep.HD, part)}
	var err error
	if c.BoundPercent, err = BufferPercent(ix, parts, c.BoundBlocks); err != nil {
		return nil, err
	}
	c.Criterion, c.Blocks, c.Percent = "bound", c.BoundBlocks, c.BoundPercent
	if maxTV > 0 && rep.Mix != nil {
		c.MixBlocks = rep.Mix.NeededBlocks(maxTV, MinBufferBlocks)
		c.Criterion, c.Blocks = "mix", c.MixBlocks
		if c.Percent, err = BufferPercent(ix, parts, c.MixBlocks); err != nil {
			return nil, err
		}
	}
	c.Bound = BoundAt(rep.HD, c.Blocks, part)
	if rep.Mix != nil {
		c.MixTV = rep.Mix.ExpectedTV(c.Blocks)
	}
	c.Bytes = int64(float64(ix.Bytes) / float64(max(parts, 1)) * c.Percent / 100)
	for _, p := range []float64{1, 2, 5, 10, 25, 50, 100} {
		k, _, err := PlannedBuffer(ix, parts, p)
		if err != nil {
			return nil, err
		}
		bp := BoundPoint{Percent: p, Blocks: k, Bound: BoundAt(rep.HD, k, part)}
		if rep.Mix != nil {
			bp.MixTV = rep.Mix.ExpectedTV(k)
		}
		c.At = append(c.At, bp)
	}
	return c, nil
}

// BufferPercent returns the smallest --buffer, in tenths of a percent of a
// part, whose buffers all hold at least n blocks (and at least
// MinBufferBlocks) in the plan a mount makes. A mount cuts a part into
// buffers of about equal bytes and closes one early when the next block
// would pass the target, so p% can hold fewer than p% of the blocks: 10%
// of 1584 blocks of 32 KiB gives 11 buffers of 144.
func BufferPercent(ix *index.Index, parts, n int) (float64, error) {
	part := max(1, len(ix.Blocks)/max(parts, 1))
	n = max(n, min(MinBufferBlocks, part))
	for t := max(1, int(math.Floor(1000*float64(n)/float64(part)))); t < 1000; t++ {
		p := float64(t) / 10
		_, fewest, err := PlannedBuffer(ix, parts, p)
		if err != nil {
			return 0, err
		}
		if fewest >= n {
			return p, nil
		}
	}
	return 100, nil
}

// PlannedBuffer returns the mean and the fewest blocks of the buffers of
// part 0 of epoch 0 with --buffer p%, as a corgipile mount plans them.
func PlannedBuffer(ix *index.Index, parts int, p float64) (mean, fewest int, err error) {
	pl, err := shuffler.NewPlanner(ix, shuffler.Params{Strategy: "corgipile", Seed: 1,
		Buffer: shuffler.BufferSize{Percent: p}, MaxMemory: math.MaxInt64 / 4})
	if err != nil {
		return 0, 0, fmt.Errorf("plan the buffers of {buffer} %g%%: %w", p, err)
	}
	plan, err := pl.Plan(0, 0, parts)
	if err != nil {
		return 0, 0, fmt.Errorf("plan the buffers of {buffer} %g%%: %w", p, err)
	}
	if len(plan.Buffers) == 0 {
		return 0, 0, nil
	}
	fewest = math.MaxInt
	var total int
	for _, b := range plan.Buffers {
		total += len(b.Blocks)
		fewest = min(fewest, len(b.Blocks))
	}
	return int(math.Round(float64(total) / float64(len(plan.Buffers)))), fewest, nil
}

// MountLine is the corgifs mount command that serves src as advised:
// blocks of block bytes, parts parts, and buf's --buffer if not nil.
// maxMemory is tune's --max-memory, 0 for the default: the line carries a
// given budget, since the mount's default buffer is chosen within it, and
// raises it when two buffers of buf need more.
func MountLine(src string, block int64, parts int, maxMemory int64, buf *BufferChoice) string {
	s := fmt.Sprintf("corgifs mount %s MNT --block-size %s", ShellQuote(src), FlagSize(block))
	if parts > 1 {
		s += fmt.Sprintf(" --parts %d", parts)
	}
	mem := maxMemory
	if buf != nil {
		s += fmt.Sprintf(" --buffer %g%%", buf.Percent)
		// Two buffers (the one served and the next) must fit in --max-memory.
		budget := maxMemory
		if budget == 0 {
			budget = mount.Defaults().MaxMemory
		}
		if need := 2 * buf.Bytes; need+need/8 > budget {
			mem = need + need/8
		}
	}
	if mem > 0 {
		s += " --max-memory " + FlagSize(mem)
	}
	return s
}

// FlagSize writes n as a size flag takes it: 32KiB, 4MiB, or, when not a
// whole number of them, rounded up to a whole MiB.
func FlagSize(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n < 1<<20 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	case n < 1<<20:
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%dMiB", (n+1<<20-1)>>20)
}

func ShellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '+' || r == ':' || r == '@' ||
			r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ProbeRemoteSource lists the objects of src that a mount would index and
// measures ranged GETs of them.
func ProbeRemoteSource(ctx context.Context, src source.Source, include []string, o ProbeOptions) (StorageReport, error) {
	if len(include) == 0 {
		include = formats.TFRecord{}.Include()
	}
	objs, err := src.List(ctx, func(base string) bool {
		return slices.ContainsFunc(include, func(p string) bool { ok, _ := path.Match(p, base); return ok })
	})
	if err != nil {
		return StorageReport{}, err
	}
	var files []RemoteFile
	for _, ob := range objs {
		if ob.Size == 0 {
			continue
		}
		f, err := src.Open(ob.Path, ob.Version)
		if err != nil {
			return StorageReport{}, err
		}
		defer f.Close()
		files = append(files, RemoteFile{Name: f.Name(), Size: ob.Size, R: f})
	}
	if len(files) == 0 {
		return StorageReport{}, fmt.Errorf("no objects under %s match {include} %s", src, strings.Join(include, ","))
	}
	return ProbeRemote(ctx, files, o)
}

// ProbeFiles lists the files of src that a mount would index.
func ProbeFiles(src string, include []string, follow bool) ([]ProbeFile, error) {
	if len(include) == 0 {
		include = formats.TFRecord{}.Include()
	}
	var files []ProbeFile
	err := filepath.WalkDir(src, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("list %s: %w", path, err)
		}
		if de.IsDir() || !slices.ContainsFunc(include, func(p string) bool { ok, _ := filepath.Match(p, de.Name()); return ok }) {
			return nil
		}
		fi, err := de.Info()
		if de.Type()&fs.ModeSymlink != 0 && follow {
			fi, err = os.Stat(path)
		}
		if err != nil {
			return fmt.Errorf("stat %s: %w", path, err)
		}
		if fi.Mode().IsRegular() && fi.Size() > 0 {
			files = append(files, ProbeFile{Path: path, Size: fi.Size()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files under %s match {include} %s", src, strings.Join(include, ","))
	}
	return files, nil
}
