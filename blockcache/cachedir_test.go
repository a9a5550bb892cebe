package blockcache

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

func TestBlockWhoseRecordsDoNotTileItGivesEIOAndMarksSidecarStale(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(ix *index.Index, b int)
	}{
		{"one record more than it holds", func(ix *index.Index, b int) { ix.Blocks[b].Records++ }},
		{"one record fewer than it holds", func(ix *index.Index, b int) { ix.Blocks[b].Records-- }},
		{"ends inside a record", func(ix *index.Index, b int) { ix.Blocks[b].Len -= 5 }},
		{"starts inside a record", func(ix *index.Index, b int) { ix.Blocks[b].Offset += 3; ix.Blocks[b].Len -= 3 }},
		{"runs into the next block", func(ix *index.Index, b int) { ix.Blocks[b].Len += ix.Blocks[b+1].Len / 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := blocktest.Dataset(t, 23, 2, 60, 400)
			cache := t.TempDir()
			o := index.Options{BlockSize: 2048, CacheDir: cache}
			ix, _, _ := openLogged(t, root, o)
			// An index that got past the check of Open, as one built from
			// a source that changed since without changing size or time.
			b := slices.IndexFunc(ix.Blocks, func(b index.Block) bool { return b.Records >= 3 })
			tc.spoil(ix, b)
			var reasons []string
			l := NewLoader(ix, LoaderOptions{MaxMemory: 1 << 20, OnDamage: func(reason string) {
				reasons = append(reasons, reason)
				if err := index.MarkStale(blocktest.Dir(t, root, false), o, reason); err != nil {
					t.Error(err)
				}
			}})
			for range 2 {
				buf, err := l.Get(t.Context(), Unit{Blocks: []int32{int32(b)}})
				if err == nil {
					l.Release(buf)
					t.Fatal("a block whose records do not tile it was served")
				}
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("error %v is not EIO", err)
				}
			}
			if len(reasons) != 1 {
				t.Fatalf("OnDamage called %d times, want once: %q", len(reasons), reasons)
			}
			_, fromCache, log := openLogged(t, root, o)
			if fromCache || !strings.Contains(log, "rebuilding index") || !strings.Contains(log, "failed its check while served") {
				t.Fatalf("Open after the damage: from cache %v, log:\n%s", fromCache, log)
			}
		})
	}
}
