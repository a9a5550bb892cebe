//go:build !linux

package local

import "os"

// willNeed does nothing where posix_fadvise is not at hand: the inflater's
// reads go through the page cache and its readahead.
func willNeed(f *os.File, off, n int64) {}
