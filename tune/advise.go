package tune

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/dustin/go-humanize"
)

// Advice is what tune measured and advises, as corgifs tune prints it
// and its --json form.
type Advice struct {
	Source    string         `json:"source"`
	Storage   *StorageReport `json:"storage,omitempty"`
	BlockSize int64          `json:"block_size"`
	Label     string         `json:"label,omitempty"`
	Features  string         `json:"features,omitempty"`
	Data      *DataReport    `json:"data,omitempty"`
	Buffer    *BufferChoice  `json:"buffer,omitempty"`
	Defaults  *DefaultsMix   `json:"defaults,omitempty"`
	Mount     string         `json:"mount"`
}

// Config is what Advise measures: the dataset as a mount takes it, the
// storage probe's settings and the data analysis's. Its errors are
// *mount.OptionError, whose {option} names are the CLI's flags without
// their dashes.
type Config struct {
	// Mount is the dataset: Source, Include (nil: TFRecord's),
	// FollowSymlinks, DirectIO, S3, MaxMemory, and the index options
	// (CacheDir, Index, Compression, SkipCorrupt, Progress). A BlockSize
	// of 0 is chosen: the probe's recommendation, else a mount's.
	Mount mount.Config
	// Label is the int64 feature of a record's class: without it, only
	// the storage is measured. Features is the feature of its input
	// vector, "" for the label's h_D alone.
	Label, Features string
	// Probe measures the storage, at the block sizes doubling from
	// MinBlock to MaxBlock (an S3 source: RemoteSizes unless
	// SizesGiven), reading up to ProbeBytes and ProbeTime per size, over
	// Rounds passes, with InFlight reads at a time (an S3 source:
	// Mount.S3.Concurrency unless InFlightGiven).
	Probe                     bool
	ProbeBytes                int64
	ProbeTime                 time.Duration
	InFlight, Rounds          int
	InFlightGiven, SizesGiven bool
	MinBlock, MaxBlock        int64
	// DataBytes are the bytes of records analysed at most; Seed fixes
	// the probe's offsets, the block sample and the random baseline.
	DataBytes int64
	Seed      uint64
	// Parts is K, the parts of an epoch the mount will serve: a buffer
	// is a share of a part.
	Parts int
	// MixTV is the label mix rule's largest expected TV of a buffer; 0
	// takes the bound's buffer instead.
	MixTV float64
	// ProbeProgress and ReadProgress, if set, are called as the probe
	// and the data analysis read.
	ProbeProgress, ReadProgress func(done, total int64)
}

func optionErrorf(option, format string, a ...any) error {
	return &mount.OptionError{Option: option, Reason: fmt.Sprintf(format, a...)}
}

// Check refuses a Config that cannot work, before anything is read.
func (c *Config) Check() error {
	switch {
	case c.Features != "" && c.Label == "":
		return optionErrorf("features", "{features} needs {label}: h_D is the gradient of a classifier")
	case !c.Probe && c.Label == "":
		return optionErrorf("probe", "nothing to measure: {probe}=false and no {label}")
	case c.MinBlock > c.MaxBlock:
		return optionErrorf("min-block", "{min-block} %s is larger than {max-block} %s", humanize.IBytes(uint64(c.MinBlock)), humanize.IBytes(uint64(c.MaxBlock)))
	case c.Parts < 1:
		return optionErrorf("parts", "{parts} %d: want at least 1", c.Parts)
	case c.MixTV < 0 || c.MixTV >= 1:
		return optionErrorf("mix-tv", "{mix-tv} %g: want at least 0 (0: use the bound) and under 1 (a TV distance is at most 1)", c.MixTV)
	case c.InFlight < 1 || c.Rounds < 1:
		return optionErrorf("in-flight", "{in-flight} %d, {rounds} %d: want at least 1", c.InFlight, c.Rounds)
	}
	return nil
}

// probeSizes are the block sizes from MinBlock to MaxBlock, doubling.
func (c *Config) probeSizes() []int64 {
	var sizes []int64
	for n := c.MinBlock; n <= c.MaxBlock; n *= 2 {
		sizes = append(sizes, n)
	}
	return sizes
}

// Advise measures the storage of c.Mount.Source and, with a Label, how
// clustered its order is, and advises the block size and the buffer of
// its mount, with the mount line that gives them.
func Advise(ctx context.Context, c Config, log *slog.Logger) (Advice, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out := Advice{Source: c.Mount.Source}
	if err := c.Check(); err != nil {
		return out, err
	}
	// An s3:// source is checked (endpoint, credentials, bucket) before
	// anything is measured, as a mount does.
	src, err := mount.OpenSource(ctx, c.Mount, log)
	if err != nil {
		return out, err
	}
	switch {
	case c.Probe && src != nil:
		o := ProbeOptions{Bytes: c.ProbeBytes, Time: c.ProbeTime, InFlight: c.Mount.S3.Concurrency, Rounds: c.Rounds, Seed: c.Seed,
			Progress: c.ProbeProgress}
		if c.InFlightGiven {
			o.InFlight = c.InFlight
		}
		if c.SizesGiven {
			o.Sizes = c.probeSizes()
		}
		rep, err := ProbeRemoteSource(ctx, src, c.Mount.Include, o)
		if err != nil {
			return out, err
		}
		out.Storage = &rep
	case c.Probe:
		files, err := ProbeFiles(c.Mount.Source, c.Mount.Include, c.Mount.FollowSymlinks)
		if err != nil {
			return out, err
		}
		// A mount reads blocks under MinDirectBlock through the page cache,
		// whose cold reads cost CPU and fall behind the device, so the
		// block it is told to use is one it reads directly.
		var floor int64
		if c.Mount.DirectIO {
			floor = index.MinDirectBlock
		}
		rep, err := Probe(ctx, files, ProbeOptions{
			Sizes: c.probeSizes(), Bytes: c.ProbeBytes, Time: c.ProbeTime, InFlight: c.InFlight, Rounds: c.Rounds, Seed: c.Seed, Floor: floor,
			Progress: c.ProbeProgress,
		})
		if err != nil {
			return out, err
		}
		out.Storage = &rep
	}
	block := c.Mount.BlockSize
	if block == 0 {
		// Without a recommendation from the storage, the block the mount
		// would choose (package sizing).
		m := c.Mount
		m.Parts = c.Parts
		block = m.ChooseSizes(ctx, src, false, log).BlockSize
		if out.Storage != nil && out.Storage.Recommended > 0 {
			block = out.Storage.Recommended
		}
	}
	out.BlockSize = block

	if c.Label != "" {
		m := c.Mount
		m.BlockSize = block
		o := m.IndexOptions(log)
		o.Progress = m.Progress
		ds, err := m.DataSource(src)
		if err != nil {
			return out, err
		}
		ix, _, err := index.Open(ctx, ds, o)
		if err != nil {
			return out, err
		}
		do := DataOptions{MaxBytes: c.DataBytes, Seed: c.Seed, Progress: c.ReadProgress}
		if src != nil {
			do.Source = src
		}
		rep, err := Data(ctx, ix, TFExample{Label: c.Label, Features: c.Features}, do)
		if err != nil {
			return out, err
		}
		out.Data = &rep
		out.Label, out.Features = c.Label, c.Features
		if out.Buffer, err = BufferAdvice(rep, ix, c.Parts, c.MixTV); err != nil {
			return out, err
		}
		out.Defaults = DefaultsAdvice(src != nil, c.Mount.MaxMemory, rep, ix, block, c.Parts, c.MixTV, out.Buffer)
	}
	buf := out.Buffer
	if out.Defaults != nil && out.Defaults.Enough {
		buf = nil // the mount's own buffer mixes enough: no --buffer
	}
	var mem int64 // the default budget goes without saying
	if c.Mount.MaxMemory != mount.Defaults().MaxMemory {
		mem = c.Mount.MaxMemory
	}
	out.Mount = MountLine(c.Mount.Source, block, c.Parts, mem, buf)
	if out.Storage != nil && out.Storage.Remote {
		out.Mount += fmt.Sprintf(" --s3-concurrency %d", out.Storage.Concurrency)
	}
	if src != nil && c.Mount.S3.Endpoint != "" {
		out.Mount += " --s3-endpoint " + ShellQuote(c.Mount.S3.Endpoint)
	}
	return out, nil
}
