package main

import (
	"errors"
)

// checkCacheDir refuses to run without a cache directory, rather than
// fall back to one that another user could have created first: --cache-dir
// defaults to one per user, never a shared directory
// (index.DefaultCacheDir), and where there is none it says what to pass.
func (d *datasetFlags) checkCacheDir() error {
	if d.c.CacheDir != "" {
		return nil
	}
	if d.cacheDirErr != nil {
		return d.cacheDirErr
	}
	return errors.New("--cache-dir is empty; pass a directory that only you can write")
}
