package mount

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/fs"
	"github.com/corgifs/corgifs/grab"
	"github.com/corgifs/corgifs/index"
	hint "github.com/corgifs/corgifs/option"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/source/s3"
)

// Config is everything a mount is opened and served with: plain values,
// checked by Check before any I/O. A zero BlockSize or Buffer is chosen
// by package sizing from the dataset's size. Options (options.go) are the
// options that set its fields, by the names of the CLI's flags without
// their dashes, which OptionError uses too.
type Config struct {
	// Source is a directory or s3://bucket/prefix.
	Source string
	// Include are the globs of file names to index; nil: the format's.
	Include        []string
	FollowSymlinks bool
	// CacheDir holds the index sidecars and the feedback stores.
	CacheDir    string
	SkipCorrupt bool
	// Compression is index.CompressionAuto, none, gzip, zlib or zstd.
	Compression string
	// Index is index.IndexFull, IndexProbe, or "" for the
	// source's default (ProbeMode).
	Index string
	// ListsRecords: the caller lists every record (corgifs order) or
	// trains with every strategy (validate): the default index is full.
	ListsRecords bool
	DirectIO     bool
	// Format is the records' format: Format, else the one named
	// FormatName, made with FormatOptions (CheckFormat); neither, to
	// choose it from the file names.
	Format        formats.Format
	FormatName    string
	FormatOptions formats.Options

	Strategy string
	// Seed of all random choices; chosen at random unless SeedGiven.
	Seed      uint64
	SeedGiven bool
	// BlockSize and Buffer: zero is chosen (package sizing).
	BlockSize  int64
	Buffer     shuffler.BufferSize
	MaxMemory  int64
	EqualParts bool
	// Partition of local, pls, grab and cdgrab ("" is random; an error
	// with another strategy); Exchange of pls (an error with another
	// strategy when ExchangeGiven).
	Partition     string
	Exchange      float64
	ExchangeGiven bool
	// Parts is the K the sizes are chosen for and the mount lists;
	// Epochs the epoch directories it lists.
	Parts  int
	Epochs int
	// Prefetch is blockcache.LoaderOptions.Prefetch: 0 the default,
	// blockcache.NoPrefetch none.
	Prefetch int

	// S3 says how to reach an s3:// Source or Coordinate (Logger is set
	// by Open).
	S3 s3.Config

	// Feedback strategies: the largest dimension of the vectors, the
	// sign rule and the wait for an epoch's feedback (each an error with
	// another strategy when given).
	FeedbackDim          int
	BalanceRule          grab.Rule
	BalanceRuleGiven     bool
	FeedbackTimeout      time.Duration
	FeedbackTimeoutGiven bool
	// OrdersOnly: the caller only prints orders (corgifs order); a
	// feedback strategy reads the orders a mount saved and nothing else.
	OrdersOnly bool
	// Coordinate is a directory or s3://bucket/prefix the nodes of a job
	// share; CoordinateRank this node's rank (-1: not given).
	Coordinate     string
	CoordinateRank int
	// FeedbackGroup (a name or GID) may write feedback files too.
	FeedbackGroup string

	// DiskCache is the directory of the disk cache, "" for none; it
	// may hold DiskCacheBytes, else DiskCachePercent of the free space.
	DiskCache        string
	DiskCacheBytes   int64
	DiskCachePercent float64

	AllowOther bool

	// Progress, if set, is called as indexing reads the source.
	Progress func(done, total int64)
	// PanicOnLookup is a test hook of fs.Config: a lookup of this name
	// panics.
	PanicOnLookup string
}

// Defaults returns the Config of a mount given no options: the source
// and, where there is no per-user default, the cache directory are left
// to the caller.
func Defaults() Config {
	dir, _ := index.DefaultCacheDir()
	return Config{
		CacheDir:         dir,
		Compression:      index.CompressionAuto,
		DirectIO:         true,
		Strategy:         "corgipile",
		MaxMemory:        1 << 30,
		Exchange:         0.3,
		Parts:            1,
		Epochs:           100,
		FeedbackDim:      64,
		FeedbackTimeout:  shuffler.DefaultFeedbackTimeout,
		CoordinateRank:   -1,
		DiskCachePercent: 50,
		S3:               s3.Config{Concurrency: 24, Timeout: 30 * time.Second},
	}
}

// OptionError is an option of a Config that cannot work: an
// *option.Error, whose Reason names options in braces, {strategy}, as
// every library of corgifs does; a CLI writes them as its flags with Text
// or option.Render.
type OptionError = hint.Error

func optionErrorf(option, format string, a ...any) error {
	return &OptionError{Option: option, Reason: fmt.Sprintf(format, a...)}
}

// Check refuses a Config that cannot work, before anything is read: an
// unknown strategy or index mode, options of another strategy, a
// coordination without a rank, parts whose names would not resolve.
// Limits that depend on the dataset (the largest block within
// MaxMemory) are checked by Open once it is indexed.
func (c *Config) Check() error {
	if c.CacheDir == "" {
		return optionErrorf("cache-dir", "{cache-dir} is empty; pass a directory that only you can write")
	}
	if err := c.CheckFormat(); err != nil {
		return err
	}
	if !shuffler.IsStrategy(c.Strategy) {
		return optionErrorf("strategy", "unknown strategy %q (choose one of %s)", c.Strategy, strings.Join(shuffler.Strategies(), ", "))
	}
	if err := c.checkBalance(); err != nil {
		return err
	}
	if err := c.checkCoordinate(); err != nil {
		return err
	}
	if err := c.checkExchange(); err != nil {
		return err
	}
	if err := c.CheckIndex(); err != nil {
		return err
	}
	if c.Parts < 1 || c.Parts > fs.MaxParts {
		return optionErrorf("parts", "{parts} %d: want 1 to %d (%d parts at most: larger part names do not resolve)", c.Parts, fs.MaxParts, fs.MaxParts)
	}
	if c.Epochs < 0 {
		return optionErrorf("epochs", "{epochs} must be >= 0")
	}
	if c.MaxMemory <= 0 {
		return optionErrorf("max-memory", "{max-memory} %d: want a positive size such as 1GiB", c.MaxMemory)
	}
	if shuffler.IsFeedback(c.Strategy) && c.FeedbackDim < 1 {
		return optionErrorf("feedback-dim", "{feedback-dim} %d: want at least 1", c.FeedbackDim)
	}
	if _, err := c.FeedbackGID(); err != nil {
		return err
	}
	return nil
}

// formatOptionOf are the options of FormatOptions and the format each
// belongs to.
var formatOptionOf = []struct {
	option, format string
	changed        func(formats.Options) bool
}{
	{"header", "csv", func(o formats.Options) bool { return o.NoHeader }},
	{"check", "jsonl", func(o formats.Options) bool { return o.CheckJSON }},
	{"record-size", "fixed", func(o formats.Options) bool { return o.RecordSize != 0 }},
	{"header-bytes", "fixed", func(o formats.Options) bool { return o.HeaderBytes != 0 }},
}

// CheckFormat checks Compression, FormatName and FormatOptions, of a
// caller that only indexes too: an option of another format is an error
// unless it has its default value (a script may pass --header=true
// whatever the format); fixed's need FormatName fixed, which is never
// chosen from the file names.
func (c *Config) CheckFormat() error {
	if err := index.CheckCompression(c.Compression); err != nil {
		return err
	}
	if c.Format != nil {
		return nil
	}
	for _, o := range formatOptionOf {
		if o.changed(c.FormatOptions) && c.FormatName != o.format && (c.FormatName != "" || o.format == "fixed") {
			return optionErrorf(o.option, "{%s} is an option of {format} %s", o.option, o.format)
		}
	}
	if c.FormatName == "" {
		return nil
	}
	if _, err := formats.Lookup(c.FormatName, c.FormatOptions); err != nil {
		return &OptionError{Option: "format", Reason: "{format}: " + err.Error(), Err: err}
	}
	return nil
}

// format is the records' format, nil to choose it from the file names
// (checked by CheckFormat).
func (c *Config) format() formats.Format {
	if c.Format != nil || c.FormatName == "" {
		return c.Format
	}
	f, _ := formats.Lookup(c.FormatName, c.FormatOptions)
	return f
}

// CheckIndex checks the index mode alone, of a caller that only
// indexes.
func (c *Config) CheckIndex() error {
	if c.Index != "" && c.Index != index.IndexFull && c.Index != index.IndexProbe {
		return optionErrorf("index", "{index} %q: want full or probe", c.Index)
	}
	return nil
}

// checkBalance refuses the options of the feedback strategies with
// another strategy, rather than ignoring them.
func (c *Config) checkBalance() error {
	if shuffler.IsFeedback(c.Strategy) {
		return nil
	}
	if c.BalanceRuleGiven {
		return optionErrorf("balance-rule", "{balance-rule} applies to {strategy} grab, cdgrab and corgipile-balance only, not %s", c.Strategy)
	}
	if c.FeedbackTimeoutGiven {
		return optionErrorf("feedback-timeout", "{feedback-timeout} applies to {strategy} grab, cdgrab and corgipile-balance only, not %s", c.Strategy)
	}
	return nil
}

// checkCoordinate refuses Coordinate where it cannot apply.
func (c *Config) checkCoordinate() error {
	switch {
	case c.Coordinate == "" && c.CoordinateRank >= 0:
		return optionErrorf("coordinate-rank", "{coordinate-rank} %d needs {coordinate} DIR", c.CoordinateRank)
	case c.Coordinate == "":
		return nil
	case !shuffler.IsFeedback(c.Strategy):
		return optionErrorf("coordinate", "{coordinate} applies to {strategy} grab, cdgrab and corgipile-balance only, not %s: the orders of the other strategies are pure functions of the seed, the same on every node without coordination", c.Strategy)
	case strings.Contains(c.Coordinate, "://") && !s3.IsURL(c.Coordinate):
		return optionErrorf("coordinate", "{coordinate} %s: want a directory or s3://bucket/prefix", c.Coordinate)
	case c.CoordinateRank < 0:
		return optionErrorf("coordinate-rank", "{coordinate} %s needs {coordinate-rank} N: 0 on the one node that computes the orders, 1, 2, ... on the others", c.Coordinate)
	}
	return nil
}

// checkExchange refuses Partition and Exchange with a strategy they do
// not apply to, rather than ignoring them.
func (c *Config) checkExchange() error {
	if c.Partition != "" && !shuffler.Partitioned(c.Strategy) {
		return optionErrorf("partition", "{partition} applies to {strategy} local, pls, grab and cdgrab only (the set each part keeps); {strategy} %s has no partition", c.Strategy)
	}
	if c.Partition != "" && c.Partition != shuffler.PartitionRandom && c.Partition != shuffler.PartitionContiguous {
		return optionErrorf("partition", "{partition} %q: want %s or %s", c.Partition, shuffler.PartitionRandom, shuffler.PartitionContiguous)
	}
	if c.ExchangeGiven && c.Strategy != "pls" {
		return optionErrorf("exchange", "{exchange} applies to {strategy} pls only (local is pls with {exchange} 0); {strategy} %s exchanges nothing", c.Strategy)
	}
	if !(c.Exchange >= 0 && c.Exchange <= 1) {
		return optionErrorf("exchange", "{exchange} %v: want a fraction Q with 0 ≤ Q ≤ 1, such as 0.3", c.Exchange)
	}
	return nil
}

// FeedbackGID resolves FeedbackGroup: nil for none (only the mount's
// owner and root write feedback), else the GID of a number or a group
// name. The group matters only where other users reach the mount, so it
// needs AllowOther and a strategy that takes feedback.
func (c *Config) FeedbackGID() (*uint32, error) {
	v := c.FeedbackGroup
	if v == "" {
		return nil, nil
	}
	if !shuffler.IsFeedback(c.Strategy) {
		return nil, optionErrorf("feedback-group", "{feedback-group} %s applies to the feedback strategies (grab, cdgrab, corgipile-balance) only, not %s", v, c.Strategy)
	}
	if !c.AllowOther {
		return nil, optionErrorf("feedback-group", "{feedback-group} %s needs {allow-other}: without it no user but the mount's owner reaches the mount", v)
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		g := uint32(n)
		return &g, nil
	}
	g, err := user.LookupGroup(v)
	if err != nil {
		return nil, optionErrorf("feedback-group", "{feedback-group} %s: no such group (%v): give a group name from /etc/group or a numeric GID", v, err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return nil, optionErrorf("feedback-group", "{feedback-group} %s: group id %q is not numeric", v, g.Gid)
	}
	gid := uint32(n)
	return &gid, nil
}

// ProbeMode is the index mode: Index, else probe for a remote source
// (reading every byte of a bucket to mount it is what probing avoids) and
// full for a local one; full too when something asked for needs every
// record indexed (SkipCorrupt, a strategy that reads single records or
// orders them by feedback, EqualParts, ListsRecords), which an Index of
// probe refuses.
func (c *Config) ProbeMode() string {
	switch {
	case c.Index != "":
		return c.Index
	case s3.IsURL(c.Source) && !c.SkipCorrupt && !shuffler.ReadsRecords(c.Strategy) && !shuffler.IsFeedback(c.Strategy) && !c.EqualParts && !c.ListsRecords:
		return index.IndexProbe
	}
	return index.IndexFull
}

// partition is the planner's Partition: Partition (random by default)
// for the partitioned strategies, else none.
func (c *Config) partition() string {
	if !shuffler.Partitioned(c.Strategy) {
		return ""
	}
	if c.Partition == "" {
		return shuffler.PartitionRandom
	}
	return c.Partition
}

// exchange is the planner's Exchange: Exchange for pls, else 0.
func (c *Config) exchange() float64 {
	if c.Strategy != "pls" {
		return 0
	}
	return c.Exchange
}
