//go:build !linux

package local

import (
	"fmt"
	"os"

	"github.com/corgifs/corgifs/source"
)

// Without Linux's O_DIRECT (reached through /proc/self/fd) and cachestat,
// every read goes through the page cache: right in every case, only
// slower when the data is cold.

// openDirect reports that direct reads cannot be had; callers then read
// through f.
func openDirect(f *os.File) (*os.File, error) {
	return nil, fmt.Errorf("open %s for direct reads: %w", f.Name(), source.ErrNoDirect)
}

// uncached treats every range as cached, so that it is read through the
// page cache.
func uncached(*os.File, int64, int64) bool { return false }

// readDirect is never reached, since openDirect gives no file to read;
// it refuses like a file system without direct I/O.
func readDirect(f *os.File, win []byte, off int64) (int, error) {
	return 0, fmt.Errorf("direct read of %d bytes at %d of %s: %w", len(win), off, f.Name(), source.ErrNoDirect)
}
