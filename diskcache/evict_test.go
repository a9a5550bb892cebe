package diskcache

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
)

// planUses is a NextUse from a plan written out by hand: epoch e reads
// the blocks of plan[e] in order.
type planUses [][]int32

func (p planUses) Next(block int32, after int64) int64 {
	for e, blocks := range p {
		for pos, b := range blocks {
			if t := UseTime(e, uint32(pos)); b == block && t > after {
				return t
			}
		}
	}
	return Never
}

// simulate reads plan through a disk cache that holds capacity blocks of
// the same size and returns the hits and the blocks held at the end.
func simulate(t *testing.T, plan [][]int32, nu NextUse, capacity int) (hits int, held []int32) {
	t.Helper()
	root := t.TempDir()
	ix := &index.Index{Root: root, Files: []index.File{{Path: "f", Size: 100_000, Mtime: 1}}}
	data := bytes.Repeat([]byte{7}, 100)
	for i := range 10 {
		// Every block holds data, as its CRC says.
		ix.Blocks = append(ix.Blocks, index.Block{File: 0, Offset: int64(10_000 + 1000*i), Len: 100, CRC: formats.UpdateChecksum(0, data)})
	}
	c, err := Open(ix, Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30, NextUse: nu})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ext := func(id int32) Extent {
		b := ix.Blocks[id]
		return Extent{File: 0, Block: id, Off: b.Offset, Len: b.Len}
	}
	c.max = int64(capacity) * entrySize(len(c.key(ext(0))), ext(0))
	dst := make([]byte, 100)
	for e, blocks := range plan {
		for _, id := range blocks {
			if c.read(ext(id), dst, nil) {
				hits++
				continue
			}
			key := c.key(ext(id))
			c.store(diskJob{name: nameOf(key), key: key, ext: ext(id), epoch: e, data: data})
		}
	}
	for _, ent := range c.entries {
		held = append(held, ent.block)
	}
	slices.Sort(held)
	return hits, held
}

func TestDiskCacheEvictsTheBlockReadFarthestInTheFutureWhereLRUWouldMissEveryTime(t *testing.T) {
	// Block 4 is read once, first; then every epoch reads 0 1 2 3 in
	// order, through a cache of 3 blocks. LRU always evicts the block
	// about to be read: after epoch 0 it never hits. Belady's rule
	// evicts 4 first (never read again), then keeps 0 1 2 and leaves 3
	// out, read later than all of them: 3 hits an epoch.
	const A, B, C, D, E = 0, 1, 2, 3, 4
	plan := [][]int32{{E, A, B, C, D}, {A, B, C, D}, {A, B, C, D}}
	hits, held := simulate(t, plan[:2], planUses(plan), 3)
	if hits != 3 || !slices.Equal(held, []int32{A, B, C}) {
		t.Fatalf("next-use eviction, epochs 0 and 1: %d hits holding %v, want 3 hits holding [0 1 2]", hits, held)
	}
	if hits, _ = simulate(t, plan, planUses(plan), 3); hits != 6 {
		t.Fatalf("next-use eviction, epochs 0 to 2: %d hits, want 6", hits)
	}
	hits, held = simulate(t, plan, nil, 3)
	if hits != 0 || !slices.Equal(held, []int32{B, C, D}) {
		t.Fatalf("LRU eviction (no NextUse): %d hits holding %v, want 0 hits holding [1 2 3]", hits, held)
	}
}

func TestDiskCacheEvictsBlocksNoPlanReadsAgainBeforeAnyOther(t *testing.T) {
	// Epoch 0 reads 0..4 through a cache of 3; epoch 1 reads only 3 and
	// 4, and then 0. After epoch 0 the cache holds what is read soonest.
	plan := [][]int32{{0, 1, 2, 3, 4}, {3, 4, 0}}
	_, held := simulate(t, plan[:1], planUses(plan), 3)
	if !slices.Equal(held, []int32{0, 3, 4}) {
		t.Fatalf("after epoch 0 the cache holds %v, want [0 3 4] (1 and 2 are never read again)", held)
	}
}
