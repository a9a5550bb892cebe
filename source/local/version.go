package local

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"
)

// A local file's version is "SIZE-MTIME" (Version), followed where the
// system gives them by ";DEV:INODE:CTIME": the device and inode name the
// file whatever path reaches it, and the inode change time moves on every
// write to the file, even one that puts back the size and the
// modification time afterwards (touch -r, rsync -t, a reproducible
// archive), since no system call sets it. So a dataset regenerated with
// equal sizes and modification times, in place or as new files renamed
// over the old, gets new versions: the index sees the change, and the
// disk cache, whose keys hold the version, misses.
//
// The price: a chmod, chown or new hard link also moves the change time,
// and a file system mounted again may number its device anew (NFS), so
// such a dataset is indexed again and its disk-cache entries miss once.

// versionOf returns the version of the file fi describes.
func versionOf(fi fs.FileInfo) string {
	v := Version(fi.Size(), fi.ModTime().UnixNano())
	if id, ok := identity(fi); ok {
		v += ";" + id
	}
	return v
}

// identity returns "DEV:INODE:CTIME" of fi, or "DEV:INODE" where the
// system has no change time in its stat, or false where it has no inodes.
func identity(fi fs.FileInfo) (string, bool) {
	key, ok := fileKey(fi)
	if !ok {
		return "", false
	}
	id := strconv.FormatUint(key[0], 10) + ":" + strconv.FormatUint(key[1], 10)
	if ct, ok := changeTime(fi); ok {
		id += ":" + strconv.FormatInt(ct, 10)
	}
	return id, true
}

// parseVersion returns the size, modification time and identity (empty
// if the version has none) of a version.
func parseVersion(v string) (size, mtime int64, id string, err error) {
	base, id, _ := strings.Cut(v, ";")
	a, b, ok := strings.Cut(base, "-")
	if ok {
		if size, err = strconv.ParseInt(a, 10, 64); err == nil {
			mtime, err = strconv.ParseInt(b, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, "", fmt.Errorf("version %q is not a local file's (size-mtime;dev:inode:ctime)", v)
	}
	return size, mtime, id, nil
}

// checkVersion says how the file fi, just opened, differs from version,
// or nil: in size, modification time, device or inode. The change time is
// left out here: it tells the index (which then rebuilds) and the disk
// cache (whose keys hold it) that a file changed, while a file open for
// reads is checked by the checksums of its records, which see bit rot
// (that leaves every time alone) and a write alike. A version without an
// identity (written by hand, or on a system without inodes) is checked on
// size and modification time alone.
func checkVersion(fi fs.FileInfo, size, mtime int64, id string) error {
	if fi.Size() != size || fi.ModTime().UnixNano() != mtime {
		return fmt.Errorf("size %d, was %d; modified %s, was %s",
			fi.Size(), size, fi.ModTime().Format(time.RFC3339Nano), time.Unix(0, mtime).Format(time.RFC3339Nano))
	}
	if id == "" {
		return nil
	}
	// Compared as numbers: Open runs for every block a loader reads, and
	// formatting the identity anew would allocate each time.
	key, ok := fileKey(fi)
	if !ok {
		return nil
	}
	if dev, ino, ok := parseFileOf(id); !ok || key != [2]uint64{dev, ino} {
		got, _ := identity(fi)
		return fmt.Errorf("same size and modification time, but device:inode %s, was %s: another file was put in its place, with the old modification time", fileOf(got), fileOf(id))
	}
	return nil
}

// parseFileOf returns the device and inode of an identity.
func parseFileOf(id string) (dev, ino uint64, ok bool) {
	d, rest, ok1 := strings.Cut(id, ":")
	i, _, _ := strings.Cut(rest, ":")
	var err1, err2 error
	dev, err1 = strconv.ParseUint(d, 10, 64)
	ino, err2 = strconv.ParseUint(i, 10, 64)
	return dev, ino, ok1 && err1 == nil && err2 == nil
}

// fileOf returns the "DEV:INODE" of an identity.
func fileOf(id string) string {
	if i := strings.LastIndexByte(id, ':'); i >= 0 && strings.Count(id, ":") == 2 {
		return id[:i]
	}
	return id
}
