//go:build !linux

package local

import "io/fs"

// changeTime reports that the change time is not read here: versions
// then hold the device and inode (where the system has them) without it.
func changeTime(fs.FileInfo) (int64, bool) { return 0, false }
