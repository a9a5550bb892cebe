package diskcache

import (
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// diskFixture is a dataset of three files indexed in 16 KiB blocks, for
// the disk cache's own tests, which need no loader.
type diskFixture struct {
	files []*blocktest.SrcFile
	ix    *index.Index
}

func newDiskFixture(t *testing.T) *diskFixture {
	t.Helper()
	root, files := blocktest.Dataset(t, 21, 3, 150, 3000)
	ix, err := index.Build(t.Context(), blocktest.Dir(t, root, false), index.Options{BlockSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return &diskFixture{files, ix}
}

// bytes returns the source bytes of block b, from the test's copy.
func (f *diskFixture) bytes(b index.Block) []byte {
	return f.files[b.File].Data[b.Offset : b.Offset+b.Len]
}
