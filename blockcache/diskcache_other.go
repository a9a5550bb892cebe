//go:build !linux

package blockcache

import (
	"errors"
	"fmt"
	"runtime"
)

// freeSpace is not known here: a --disk-cache-size must be a size.
func freeSpace(dir string) (int64, error) {
	return 0, fmt.Errorf("free space of %s is not known on %s: %w", dir, runtime.GOOS, errors.ErrUnsupported)
}
