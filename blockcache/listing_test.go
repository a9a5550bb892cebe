package blockcache

import (
	"github.com/corgifs/corgifs/internal/testtree"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPathLongerThanPathMaxIsSkippedNamingIt(t *testing.T) {
	root := t.TempDir()
	writeRecords(t, root, "a.tfrecord", [][]byte{[]byte("a")})
	data, _ := frames(t, [][]byte{[]byte("deep")})
	file, inDir := testtree.DeepTree(t, root, data)
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
