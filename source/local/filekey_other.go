//go:build !unix

package local

import "io/fs"

// fileKey reports that fi carries no device and inode numbers here: a file
// reached under two names is then listed twice, and a loop of symbolic
// links is followed until the path grows too long for the system.
func fileKey(fs.FileInfo) ([2]uint64, bool) { return [2]uint64{}, false }
