package main

import (
	"errors"
	"flag"

	"github.com/corgifs/corgifs/index"
)

// registerCacheDir adds --cache-dir, whose default is per user and never a
// shared directory (index.DefaultCacheDir). Where there is no default,
// the flag is empty and checkCacheDir says what to pass.
func (d *datasetFlags) registerCacheDir(fs *flag.FlagSet) {
	def, err := index.DefaultCacheDir()
	d.cacheDirErr = err
	fs.StringVar(&d.cacheDir, "cache-dir", def, "`dir`ectory for index sidecars: never inside SRC, owned by the user running corgifs and\n"+
		"writable by nobody else (created with mode 0700). Default $XDG_CACHE_HOME/corgifs or\n"+
		"~/.cache/corgifs; without HOME and XDG_CACHE_HOME, /var/cache/corgifs for root, else required")
}

// checkCacheDir refuses to run without a cache directory, rather than
// fall back to one that another user could have created first.
func (d *datasetFlags) checkCacheDir() error {
	if d.cacheDir != "" {
		return nil
	}
	if d.cacheDirErr != nil {
		return d.cacheDirErr
	}
	return errors.New("--cache-dir is empty; pass a directory that only you can write")
}
