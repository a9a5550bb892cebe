package fs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MountTypeName is the file system type of every corgifs mount in
// /proc/self/mountinfo: "fuse." followed by MountOptions.Name.
const MountTypeName = "fuse." + mountName

// mountName is the FUSE subtype corgifs mounts with.
const mountName = "corgifs"

// ErrNotMounted says that nothing is mounted at a path.
var ErrNotMounted = errors.New("not a mount point")

// MountType returns the file system type of the mount at mnt (the topmost
// one, if several are stacked there), as /proc/self/mountinfo gives it.
// A dead FUSE mount, whose root cannot even be looked up, is found too.
func MountType(mnt string) (string, error) {
	path, err := mountPath(mnt)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mount table: %w", err)
	}
	typ, ok := mountTypeAt(b, path)
	if !ok {
		return "", fmt.Errorf("%s: %w", mnt, ErrNotMounted)
	}
	return typ, nil
}

// mountPath makes mnt absolute and resolves the symlinks of its parent,
// but not mnt itself: the root of a dead FUSE mount fails every lookup.
func mountPath(mnt string) (string, error) {
	abs, err := filepath.Abs(mnt)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("mount point %s: %w", mnt, err)
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// mountTypeAt finds in a mountinfo table the type of the last (so topmost)
// mount at path.
func mountTypeAt(table []byte, path string) (string, bool) {
	typ, _, ok := mountAt(table, path)
	return typ, ok
}

// mountAt finds in a mountinfo table the type and the device ("MAJ:MIN")
// of the last (so topmost) mount at path. A line is "ID PARENT MAJ:MIN
// ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS"
// (proc(5)), with spaces and other special bytes of paths escaped as \ooo.
func mountAt(table []byte, path string) (typ, dev string, found bool) {
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || unescapeMountinfo(f[4]) != path {
			continue
		}
		for i := 5; i+1 < len(f); i++ {
			if f[i] == "-" {
				typ, dev, found = f[i+1], f[2], true
				break
			}
		}
	}
	return typ, dev, found
}

// mountDevice returns the device ("MAJ:MIN") of the mount at mnt, read from
// /proc/self/mountinfo: a stat of mnt would ask the FUSE server, which from
// the serving process itself can hang its exit (a thread waiting for its
// own answer when the process is killed).
func mountDevice(mnt string) (string, error) {
	path, err := mountPath(mnt)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mount table: %w", err)
	}
	_, dev, ok := mountAt(b, path)
	if !ok {
		return "", fmt.Errorf("%s: %w", mnt, ErrNotMounted)
	}
	return dev, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
