//go:build !linux

package diskcache

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/corgifs/corgifs/source"
)

// freeSpace is not known here: a --disk-cache-size must be a size.
func freeSpace(dir string) (int64, error) {
	return 0, fmt.Errorf("free space of %s is not known on %s: %w", dir, runtime.GOOS, errors.ErrUnsupported)
}

// readEntryAt reads hdr then dst from the start of f, and returns the
// bytes read.
func readEntryAt(f *os.File, hdr, dst []byte) (int, error) {
	n, err := f.ReadAt(hdr, 0)
	if err != nil {
		return n, err
	}
	m, err := f.ReadAt(dst, int64(len(hdr)))
	return n + m, err
}

// uncached is false here: entries are read through the page cache.
func uncached(*os.File, int64) bool { return false }

// readEntryDirect is never called here (uncached is false).
func readEntryDirect(f *os.File, _, _ []byte) (int, error) {
	return 0, fmt.Errorf("direct read of %s on %s: %w", f.Name(), runtime.GOOS, source.ErrNoDirect)
}
