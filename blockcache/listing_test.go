package blockcache

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// deepTree makes, under base, directories nested deep enough that the path
// of near/<250 bytes>.tfrecord passes PATH_MAX while near itself does not,
// and a directory under near whose own path passes it, holding a file. It
// works relative to each directory (mkdirat, openat), as a user's deep tree
// would have been made, and returns the two files' paths.
func deepTree(t testing.TB, base string, data []byte) (file, inDir string) {
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

func TestPathLongerThanPathMaxIsSkippedNamingIt(t *testing.T) {
	root := t.TempDir()
	writeRecords(t, root, "a.tfrecord", [][]byte{[]byte("a")})
	data, _ := frames(t, [][]byte{[]byte("deep")})
	file, inDir := deepTree(t, root, data)
	for _, follow := range []bool{false, true} {
		var log strings.Builder
		ix, err := Build(t.Context(), root, Options{FollowSymlinks: follow, Logger: newTextLogger(&log)})
		if err != nil {
			t.Fatalf("follow=%v: %v", follow, err)
		}
		if len(ix.Files) != 1 || ix.Files[0].Path != "a.tfrecord" || ix.Records != 1 {
			t.Errorf("follow=%v: indexed %+v, want a.tfrecord alone", follow, ix.Files)
		}
		for _, p := range []string{file, filepath.Dir(inDir)} {
			if !strings.Contains(log.String(), p) || !strings.Contains(log.String(), "PATH_MAX") {
				t.Errorf("follow=%v: the log does not name %s as longer than PATH_MAX:\n%.600s", follow, filepath.Base(p), log.String())
			}
		}
	}
}

func TestFileReachedTwiceIsIndexedOnce(t *testing.T) {
	root := t.TempDir()
	writeRecords(t, root, "a.tfrecord", [][]byte{[]byte("a1"), []byte("a2")})
	writeRecords(t, root, "b.tfrecord", [][]byte{[]byte("b1")})
	writeRecords(t, root, "sub/c.tfrecord", [][]byte{[]byte("c1")})
	if err := os.Symlink("a.tfrecord", filepath.Join(root, "alias.tfrecord")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../b.tfrecord", filepath.Join(root, "sub", "b-alias.tfrecord")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "sub", "c.tfrecord"), filepath.Join(root, "hard.tfrecord")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		follow  bool
		want    []string
		skipped []string
	}{
		{false, []string{"a.tfrecord", "b.tfrecord", "hard.tfrecord"}, []string{"sub/c.tfrecord"}},
		{true, []string{"a.tfrecord", "b.tfrecord", "hard.tfrecord"}, []string{"alias.tfrecord", "sub/b-alias.tfrecord", "sub/c.tfrecord"}},
	} {
		var log strings.Builder
		ix, err := Build(t.Context(), root, Options{FollowSymlinks: tt.follow, Logger: newTextLogger(&log)})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range ix.Files {
			got = append(got, f.Path)
		}
		if !slices.Equal(got, tt.want) || ix.Records != 4 {
			t.Errorf("follow=%v: files %v with %d records, want %v with 4", tt.follow, got, ix.Records, tt.want)
		}
		for _, p := range tt.skipped {
			if !strings.Contains(log.String(), "path="+p) {
				t.Errorf("follow=%v: the log does not name the skipped %s:\n%s", tt.follow, p, log.String())
			}
		}
	}
}
