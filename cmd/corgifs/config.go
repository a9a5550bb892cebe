package main

import (
	"github.com/corgifs/corgifs/mount"
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

// config is the options as the mount.Config of src, unchecked.
func (d *datasetFlags) config(src string) mount.Config {
	c := d.c
	c.Source = src
	c.Parts = max(1, c.Parts)
	return c
}

// cliError is an error of a library in the words of the CLI.
type cliError struct {
	text string
	err  error
}

func (e *cliError) Error() string { return e.text }
func (e *cliError) Unwrap() error { return e.err }

// flagError writes the options err names as the flags that set them:
// {strategy} as --strategy.
func flagError(err error) error {
	if err == nil {
		return nil
	}
	return &cliError{text: flagText(err), err: err}
}
