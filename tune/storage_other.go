//go:build !linux

package tune

import (
	"context"
	"errors"
)

// Probe needs O_DIRECT and cachestat, which only Linux has here.
func Probe(ctx context.Context, files []ProbeFile, o ProbeOptions) (StorageReport, error) {
	return StorageReport{}, errors.New("the storage probe runs on Linux only")
}
