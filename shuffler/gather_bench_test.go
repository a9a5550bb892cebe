package shuffler

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// BenchmarkStreamReadAt measures what the shuffle costs on the read path: a
// buffer of 96 MiB of 1 KiB records, loaded once, served in 1 MiB reads in
// the CorgiPile order (records gathered from random places of the slab)
// and in the source order (the slab copied front to back).
//
//	go test -run '^$' -bench StreamReadAt ./shuffler
func BenchmarkStreamReadAt(b *testing.B) {
	root := b.TempDir()
	f, err := os.Create(filepath.Join(root, "data.tfrecord"))
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := formats.NewWriter(bw)
	payload := make([]byte, 1015) // 1031-byte frames, as the 240-feature synthetic records
	for i := range 96 << 10 {
		payload[0], payload[1] = byte(i), byte(i>>8)
		if err := w.Write(payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	ix, err := index.Build(b.Context(), blocktest.Dir(b, root, false), index.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, strategy := range []string{"corgipile", "none"} {
		b.Run(strategy, func(b *testing.B) {
			pl, err := NewPlanner(ix, Params{Strategy: strategy, Seed: 1, Buffer: BufferSize{Percent: 100}, MaxMemory: 512 << 20})
			if err != nil {
				b.Fatal(err)
			}
			plan, err := pl.Plan(0, 0, 1)
			if err != nil || len(plan.Buffers) != 1 {
				b.Fatalf("plan of %d buffers, %v; want one", len(plan.Buffers), err)
			}
			s := NewStream(pl, blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: 512 << 20}), plan)
			defer s.Close()
			p := make([]byte, 1<<20)
			chunks := plan.Size / int64(len(p))
			if _, err := s.ReadAt(b.Context(), p, 0); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(p)))
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.ReadAt(b.Context(), p, int64(i)%chunks*int64(len(p))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
