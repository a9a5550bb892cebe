//go:build !linux

package tune

import "os"

func coldRange(f *os.File, off, n int64) bool { return false }
func dropRange(f *os.File, off, n int64)      {}
