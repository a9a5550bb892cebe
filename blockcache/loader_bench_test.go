package blockcache

import (
	"math/rand/v2"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// benchLoad loads unit(i) again and again from a warm dataset: the read
// path (opening files through the source, reading, splitting and checking
// records), not the disk. Run with -benchmem: a load allocates per file
// and per unit, never per record.
func benchLoad(b *testing.B, o LoaderOptions, unit func(ix *index.Index, r *rand.Rand) Unit) {
	root, _ := blocktest.Dataset(b, 5, 4, 2000, 3000)
	ix := build(b, root, index.Options{BlockSize: 64 << 10})
	// Room for a few units of the 64 cycled through: every Get loads.
	o.MaxMemory = 4 << 20
	l := NewLoader(ix, o)
	r := rand.New(rand.NewPCG(1, 2))
	units := make([]Unit, 64)
	var bytes int64
	for i := range units {
		units[i] = unit(ix, r)
		bytes += l.size(units[i])
	}
	b.SetBytes(bytes / int64(len(units)))
	b.ResetTimer()
	for i := range b.N {
		u := units[i%len(units)]
		buf, err := l.Get(b.Context(), u)
		if err != nil {
			b.Fatal(err)
		}
		l.Release(buf)
	}
}

// BenchmarkLoaderBlocks loads 16 random blocks at a time.
func BenchmarkLoaderBlocks(b *testing.B) {
	benchLoad(b, LoaderOptions{}, func(ix *index.Index, r *rand.Rand) Unit {
		u := Unit{Blocks: make([]int32, 16)}
		for i := range u.Blocks {
			u.Blocks[i] = int32(r.IntN(len(ix.Blocks)))
		}
		return u
	})
}

// BenchmarkLoaderRecords loads 256 random records at a time, as the
// strategies that read records one at a time do.
func BenchmarkLoaderRecords(b *testing.B) {
	benchLoad(b, LoaderOptions{}, func(ix *index.Index, r *rand.Rand) Unit {
		u := Unit{Records: make([]int32, 256)}
		for i := range u.Records {
			u.Records[i] = int32(r.Int64N(ix.Records))
		}
		return u
	})
}
