// Package testtree builds the file trees that tests of more than one package
// need and that a shell cannot make easily, such as paths longer than
// PATH_MAX.
package testtree

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// DeepTree makes, under base, directories nested deep enough that the path
// of near/<250 bytes>.tfrecord passes PATH_MAX while near itself does not,
// and a directory under near whose own path passes it, holding a file. It
// works relative to each directory (mkdirat, openat), as a user's deep tree
// would have been made, and returns the two files' paths.
func DeepTree(t testing.TB, base string, data []byte) (file, inDir string) {
	t.Helper()
	fd, err := syscall.Open(base, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := base
	down := func(name string) {
		if err := syscall.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatalf("mkdir at depth %d bytes: %v", len(path), err)
		}
		next, err := syscall.Openat(fd, name, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
		fd, path = next, path+"/"+name
	}
	create := func(name string) string {
		f, err := syscall.Openat(fd, name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(f)
		if _, err := syscall.Write(f, data); err != nil {
			t.Fatal(err)
		}
		return path + "/" + name
	}
	defer func() { syscall.Close(fd) }()
	for len(path)+101 <= 3990 {
		down(strings.Repeat("d", 100))
	}
	file = create("deep-file-" + strings.Repeat("f", 230) + ".tfrecord")
	down("deep-dir-" + strings.Repeat("g", 240))
	inDir = create("in-deep-dir.tfrecord")
	if len(file) <= 4096 || len(inDir) <= 4096 || len(filepath.Dir(file)) >= 4096 {
		t.Fatalf("paths of %d and %d bytes under a directory of %d: the tree is not deep enough", len(file), len(inDir), len(filepath.Dir(file)))
	}
	return file, inDir
}
