package index

import (
	"testing"

	"github.com/corgifs/corgifs/internal/blocktest"
)

// blockBytes returns the source bytes of a block, read from the test's copy.
func blockBytes(files []*blocktest.SrcFile, b Block) []byte {
	return files[b.File].Data[b.Offset : b.Offset+b.Len]
}

// build is Build that fails the test on error.
func build(t testing.TB, root string, o Options) *Index {
	t.Helper()
	ix, err := Build(t.Context(), blocktest.Dir(t, root, o.FollowSymlinks), o)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}
