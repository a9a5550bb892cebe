package main

import (
	"errors"
	"strings"

	"github.com/corgifs/corgifs/mount"
)

// mountConfig checks the flags that are the CLI's to check (the cache
// directory's default, the format's options, the seed's syntax) and
// returns them as the mount.Config of src, checked by its Check.
func (d *datasetFlags) mountConfig(src string) (mount.Config, error) {
	if err := d.checkCacheDir(); err != nil {
		return mount.Config{}, err
	}
	if err := d.resolveFormat(); err != nil {
		return mount.Config{}, err
	}
	c := d.config(src)
	if err := c.Check(); err != nil {
		return c, flagError(err)
	}
	if d.seed != "" {
		seed, _, err := d.parseSeed()
		if err != nil {
			return c, err
		}
		c.Seed, c.SeedGiven = seed, true
	}
	return c, nil
}

// config is the flags as a mount.Config of src, unchecked.
func (d *datasetFlags) config(src string) mount.Config {
	c := mount.Defaults()
	c.Source = src
	c.Include = nil
	if d.includeSet {
		c.Include = d.include
	}
	c.FollowSymlinks, c.CacheDir, c.SkipCorrupt, c.Compression = d.follow, d.cacheDir, d.skipCorrupt, d.compression
	c.Index, c.ListsRecords, c.DirectIO = d.index, d.listsRecords, d.directIO
	if d.format != nil {
		c.Format, c.FormatOptions = d.format.format, d.format.options
	}
	c.Strategy, c.BlockSize, c.Buffer, c.MaxMemory, c.EqualParts = d.strategy, int64(d.blockSize), d.buffer.v, int64(d.maxMemory), d.equalParts
	c.Partition = ""
	if d.partitionGiven {
		c.Partition = string(d.partition)
	}
	c.Exchange, c.ExchangeGiven = float64(d.exchange), d.exchangeGiven
	c.Parts = max(1, d.parts)
	c.Prefetch = d.prefetch
	c.S3 = d.s3.config(nil)
	c.FeedbackDim = d.feedbackDim
	c.BalanceRule, c.BalanceRuleGiven = d.balance.rule.r, d.balance.ruleGiven
	c.FeedbackTimeout, c.FeedbackTimeoutGiven = d.balance.timeout.d, d.balance.timeoutGiven
	c.OrdersOnly = d.balance.printOnly
	c.Coordinate, c.CoordinateRank = d.coordinate.dir, d.coordinate.rank
	if !d.coordinate.registered {
		c.CoordinateRank = -1
	}
	return c
}

// cliError is an error of package mount in the words of the CLI.
type cliError struct {
	text string
	err  error
}

func (e *cliError) Error() string { return e.text }
func (e *cliError) Unwrap() error { return e.err }

// flagError writes the options a mount.OptionError in err names as the
// flags that set them: {strategy} as --strategy.
func flagError(err error) error {
	var oe *mount.OptionError
	if !errors.As(err, &oe) {
		return err
	}
	return &cliError{text: strings.Replace(err.Error(), oe.Error(), oe.Text("--"), 1), err: err}
}
