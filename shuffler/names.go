package shuffler

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// EpochName returns the directory name of epoch e: epoch-EEEE.
func EpochName(e int) string { return fmt.Sprintf("epoch-%04d", e) }

// PartPath returns the path of part i of k of epoch e under the mount point
// mnt, for readers of a mount (the CLI's child mounts, tests, benchmarks).
func PartPath(mnt string, e, i, k int, ext string) string {
	return filepath.Join(mnt, EpochName(e), PartName(i, k, ext))
}

// PartName returns the file name of part i of k: part-IIIII-of-KKKKK
// followed by ext, the format's extension (".tfrecord", ".csv").
func PartName(i, k int, ext string) string { return fmt.Sprintf("part-%05d-of-%05d%s", i, k, ext) }

// ParsePartName returns i and k of the name PartName(i, k, ext) gives, with
// 0 <= i < k; any other spelling (no zero padding, another extension) is
// not a part name, so that every part has exactly one name.
func ParsePartName(name, ext string) (i, k int, ok bool) {
	s, ok := strings.CutSuffix(name, ext)
	if !ok {
		return 0, 0, false
	}
	s, ok = strings.CutPrefix(s, "part-")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(s, "-of-")
	if !ok {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	k, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || k < 1 || i < 0 || i >= k || PartName(i, k, ext) != name {
		return 0, 0, false
	}
	return i, k, true
}
