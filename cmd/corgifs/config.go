package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/sizing"
)

// mountConfig checks the flags that are the CLI's to check (the cache
// directory's default) and returns them as the
// mount.Config of src, checked by its Check.
func (d *datasetFlags) mountConfig(src string) (mount.Config, error) {
	if err := d.checkCacheDir(); err != nil {
		return mount.Config{}, err
	}
	if err := d.checkFormat(); err != nil {
		return mount.Config{}, err
	}
	c := d.config(src)
	if err := c.Check(); err != nil {
		return c, flagError(err)
	}
	return c, nil
}

// config is the options as the mount.Config of src, unchecked: with the
// sizes chooseSizes chose where none
// were given.
func (d *datasetFlags) config(src string) mount.Config {
	c := d.c
	c.Source = src
	c.Parts = max(1, c.Parts)
	if d.sizes != nil {
		if c.BlockSize == 0 {
			c.BlockSize = d.sizes.BlockSize
		}
		if c.Buffer == (shuffler.BufferSize{}) {
			c.Buffer = d.sizes.Buffer
		}
	}
	return c
}

// indexOptions are the options of the index of src (for the commands
// that index without mounting), with a progress bar on a terminal.
func (d *datasetFlags) indexOptions(src string, log *slog.Logger, progress io.Writer) index.Options {
	c := d.config(src)
	o := c.IndexOptions(log)
	o.Progress = progressFunc(progress, "indexing")
	return o
}

// openIndex opens (builds, or loads from its sidecar) the index of src
// for the commands that index without mounting, with indexOptions.
func (d *datasetFlags) openIndex(ctx context.Context, src string, log *slog.Logger, progress io.Writer) (*index.Index, error) {
	c := d.config(src)
	ds, err := c.DataSource(d.source)
	if err != nil {
		return nil, err
	}
	ix, _, err := index.Open(ctx, ds, d.indexOptions(src, log, progress))
	return ix, err
}

// loaderOptions are the options of an in-process loader of the dataset
// (validate), its budget left to the caller.
func (d *datasetFlags) loaderOptions(log *slog.Logger) blockcache.LoaderOptions {
	c := d.config("")
	return c.LoaderOptions(d.source, 0, log)
}

// chooseSizes sets the block size and the buffer that were not given by
// package sizing's rule (mount.Config.ChooseSizes), for the commands that
// index without mounting.
func (d *datasetFlags) chooseSizes(ctx context.Context, src string, recordStrategy bool, log *slog.Logger) sizing.Choice {
	c := d.config(src)
	ch := c.ChooseSizes(ctx, d.source, recordStrategy, log)
	d.sizes = &ch
	return ch
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
