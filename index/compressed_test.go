package index

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/internal/blocktest"
)

// A sidecar whose access points are not what indexing makes (dropped,
// reordered, pointing past the file, a window lost, a compressed file
// turned stored) is rebuilt, never used to decompress from.
func TestPlantedSidecarWithMisplacedAccessPointsIsRebuilt(t *testing.T) {
	plain := blocktest.BigTFRecord(t, 4, 300<<10)
	for _, tc := range []struct {
		name  string
		spoil func(ix *Index)
	}{
		{"no access points", func(ix *Index) { ix.Files[0].Access.Points = nil }},
		{"two points swapped", func(ix *Index) {
			p := ix.Files[0].Access.Points
			p[1], p[2] = p[2], p[1]
		}},
		{"a point past the end", func(ix *Index) {
			p := ix.Files[0].Access.Points
			p[len(p)-1].In = ix.Files[0].Size*8 + 3
		}},
		{"a window lost", func(ix *Index) { ix.Files[0].Access.Points[1].Window = nil }},
		{"the file read as stored", func(ix *Index) { ix.Files[0].Access = nil }},
		// As older versions cut compressed files: blocks that tile the
		// file but run over a cut of the plain rule.
		{"two blocks merged over a cut", func(ix *Index) {
			b := ix.Blocks
			b[1].Len += b[2].Len
			b[1].Records += b[2].Records
			ix.Blocks = slices.Delete(b, 2, 3)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord.gz"), blocktest.GzipMembers(1, 6)(t, plain))
			cache := t.TempDir()
			o := Options{BlockSize: 32 << 10, CacheDir: cache}
			want, _, _ := openLogged(t, root, o)
			if len(want.Files[0].Access.Points) < 3 {
				t.Fatalf("%d access points", len(want.Files[0].Access.Points))
			}
			resealSidecar(t, sidecars(t, cache)[0], tc.spoil)
			ix, fromCache, log := openLogged(t, root, o)
			if fromCache {
				t.Fatalf("the planted sidecar was used; log:\n%s", log)
			}
			if !slices.Equal(ix.Blocks, want.Blocks) || len(ix.Files[0].Access.Points) != len(want.Files[0].Access.Points) {
				t.Fatal("the rebuilt index differs from the built one")
			}
		})
	}
}
