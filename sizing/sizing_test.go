package sizing

import (
	"math"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/shuffler"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// TestChooseGivesManyBlocksPerBufferAndAWholePartWhenItFits is the rule as
// a table: dataset sizes, K, source kinds, budgets and given flags.
func TestChooseGivesManyBlocksPerBufferAndAWholePartWhenItFits(t *testing.T) {
	pct := func(p float64) shuffler.BufferSize { return shuffler.BufferSize{Percent: p} }
	cases := []struct {
		name      string
		in        Input
		block     int64
		buffer    shuffler.BufferSize
		wholePart bool
		warn      string // a substring of the warning; "" none
	}{
		// Fashion-MNIST as TFRecord (about 48 MB): one part fits, 128 KiB
		// blocks give 366 of them.
		{"fashion K=1 local", Input{DatasetBytes: 48 * 1000 * 1000, Parts: 1, MaxMemory: gib}, 128 * kib, pct(100), true, ""},
		{"fashion K=8 local", Input{DatasetBytes: 48 * 1000 * 1000, Parts: 8, MaxMemory: gib}, 16 * kib, pct(100), true, ""},
		// An object store keeps blocks of megabytes even for small data.
		{"fashion K=1 s3", Input{DatasetBytes: 48 * 1000 * 1000, Parts: 1, MaxMemory: gib, ObjectStore: true}, mib, pct(100), true, ""},
		// 64 × the floor: still a whole part, no warning (issue 23's target).
		{"64 floors s3", Input{DatasetBytes: 64 * mib, Parts: 1, MaxMemory: gib, ObjectStore: true}, mib, pct(100), true, ""},
		{"64 floors local K=8", Input{DatasetBytes: 64 * LocalFloor, Parts: 8, MaxMemory: gib}, LocalFloor, pct(100), true, ""},
		{"tiny", Input{DatasetBytes: 1000, Parts: 1, MaxMemory: gib}, LocalFloor, pct(100), true, ""},
		// Larger than the memory: the largest buffer, 256 to 511 blocks of it
		// (the block is a power of two).
		{"1 TiB local", Input{DatasetBytes: 1 << 40, Parts: 1, MaxMemory: gib}, 512 * kib, shuffler.BufferSize{Bytes: BufferLimit(gib / 2)}, false, ""},
		{"1 TiB s3 K=64", Input{DatasetBytes: 1 << 40, Parts: 64, MaxMemory: gib, ObjectStore: true}, mib, shuffler.BufferSize{Bytes: BufferLimit(gib / 2)}, false, ""},
		// A large memory: blocks reach the ceiling, more than 256 a buffer.
		{"ceiling", Input{DatasetBytes: 1 << 44, Parts: 1, MaxMemory: 64 * gib}, Ceiling, shuffler.BufferSize{Bytes: BufferLimit(32 * gib)}, false, ""},
		// Too little memory for 128 blocks of the object store's floor.
		// K parts read on one node share the memory: 1 GiB in 8 parts
		// does not fit whole, so each gets an eighth of the buffer room.
		{"1 GiB local K=8", Input{DatasetBytes: gib, Parts: 8, MaxMemory: gib}, 64 * kib, shuffler.BufferSize{Bytes: BufferLimit(gib/2) / 8}, false, ""},
		{"s3 small memory", Input{DatasetBytes: 10 * gib, Parts: 1, MaxMemory: 128 * mib, ObjectStore: true}, mib, shuffler.BufferSize{Bytes: BufferLimit(64 * mib)}, false, "use {max-memory} 517 MiB or more"},
		// Given flags are kept; the rule says what they cost.
		{"given block", Input{DatasetBytes: 10 * gib, Parts: 1, MaxMemory: gib, BlockSize: 8 * mib}, 8 * mib, shuffler.BufferSize{Bytes: BufferLimit(gib / 2)}, false, "use {block-size} 1.0 MiB or less"},
		{"given buffer", Input{DatasetBytes: gib, Parts: 1, MaxMemory: gib, Buffer: shuffler.BufferSize{Bytes: 32 * kib}}, LocalFloor, shuffler.BufferSize{Bytes: 32 * kib}, false, "use a larger {buffer} (at least 64 KiB)"},
		// The index's share of memory: 10 GiB at the floor would be 21
		// million blocks, 800 MiB of index; 2 KiB blocks keep it to 200.
		{"given buffer, index bound", Input{DatasetBytes: 10 * gib, Parts: 1, MaxMemory: gib, Buffer: shuffler.BufferSize{Bytes: 32 * kib}}, 2 * kib, shuffler.BufferSize{Bytes: 32 * kib}, false, "use a larger {buffer} (at least 256 KiB)"},
		// TestSixtyFourReadersStayWithinMaxMemoryPlus64MiB's mount: 1 GiB
		// in 64 parts at 64 MiB, whose buffers ask for 512 B blocks.
		{"64 readers at 64 MiB", Input{DatasetBytes: gib, Parts: 64, MaxMemory: 64 * mib}, 4 * kib, shuffler.BufferSize{Bytes: BufferLimit(32*mib) / 64}, false, "blocks of 4.0 KiB keep the index of 1.0 GiB within 1/4 of {max-memory}; use {max-memory} 80 MiB or more"},
		{"given 10%", Input{DatasetBytes: 48 * 1000 * 1000, Parts: 1, MaxMemory: gib, Buffer: pct(10)}, 16 * kib, pct(10), false, ""},
		// Record strategies keep their small window, and the block size
		// of the other strategies (one index for all).
		{"window", Input{DatasetBytes: 48 * 1000 * 1000, Parts: 1, MaxMemory: gib, RecordStrategy: true}, 128 * kib, pct(RecordBuffer), false, ""},
		// sklearn's tiny sets (VALIDATION.md, "At the defaults"): in 8
		// parts the floor of 512 bytes, 22 and 148 blocks a part (a
		// digits block is one or two of its records of 450 bytes); digits
		// in one part is over 256 floors, so the rule gives 2 KiB (296
		// blocks), not the floor.
		{"sklearn breast_cancer K=8", Input{DatasetBytes: 90312, Parts: 8, MaxMemory: gib}, 512, pct(100), true, ""},
		{"sklearn digits K=8", Input{DatasetBytes: 606150, Parts: 8, MaxMemory: gib}, 512, pct(100), true, ""},
		{"sklearn digits K=1", Input{DatasetBytes: 606150, Parts: 1, MaxMemory: gib}, 2 * kib, pct(100), true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Choose(tc.in)
			if c.BlockSize != tc.block || c.Buffer != tc.buffer || c.WholePart != tc.wholePart {
				t.Fatalf("Choose(%+v) = block %d buffer %v whole part %v; want %d %v %v\n%s",
					tc.in, c.BlockSize, c.Buffer, c.WholePart, tc.block, tc.buffer, tc.wholePart, c.Reason)
			}
			if (tc.warn == "") != (c.Warning == "") || !strings.Contains(c.Warning, tc.warn) {
				t.Fatalf("warning %q, want one with %q", c.Warning, tc.warn)
			}
			if c.Reason == "" {
				t.Fatal("no reason")
			}
			if !tc.in.RecordStrategy && tc.in.BlockSize == 0 && tc.in.Buffer == (shuffler.BufferSize{}) && !c.WholePart &&
				c.BlockSize < Ceiling && c.BlockSize > Floor(tc.in.ObjectStore) && !c.IndexBound && c.BlocksPerBuffer < TargetBlocks {
				t.Fatalf("%d blocks a buffer, want at least %d when neither floor, ceiling nor the index's share binds", c.BlocksPerBuffer, TargetBlocks)
			}
			// The buffer of a part always fits twice in the slabs the
			// loader is sure to get.
			if c.BufferBytes > BufferLimit(tc.in.MaxMemory/2) {
				t.Fatalf("buffer %d over the limit %d", c.BufferBytes, BufferLimit(tc.in.MaxMemory/2))
			}
		})
	}
}

// TestMemoryForIsTheSmallestSufficientBudget checks the --max-memory the
// warning names.
func TestMemoryForIsTheSmallestSufficientBudget(t *testing.T) {
	for _, b := range []int64{1, 4 * kib, 128 * mib, 3*gib + 7} {
		m := MemoryFor(b)
		if BufferLimit(m/2) < b || BufferLimit((m-1)/2) >= b {
			t.Fatalf("MemoryFor(%d) = %d: not the smallest budget whose buffer limit holds it", b, m)
		}
	}
}

// TestExpectedTVMatchesTheMeasuredMixes compares the formula with the
// label TV of issue 23's runs: 19 blocks a buffer measured 0.265, 143
// measured 0.093 (of about 1,500 blocks).
func TestExpectedTVMatchesTheMeasuredMixes(t *testing.T) {
	for _, c := range []struct {
		b, n int64
		tv   float64
	}{{19, 380, 0.265}, {143, 1500, 0.093}} {
		if got := ExpectedTV(c.b, c.n, 10); math.Abs(got-c.tv) > 0.015 {
			t.Fatalf("ExpectedTV(%d, %d) = %.3f, measured %.3f", c.b, c.n, got, c.tv)
		}
	}
	if ExpectedTV(10, 10, 10) != 0 {
		t.Fatal("a buffer of every block has the global mix")
	}
}

// TestNoWarningAtTheDefaultsForDataOf64FloorsOrMore is issue 23's target:
// at the default --max-memory no dataset of at least 64 × the floor warns,
// whatever its K or source kind, unless its index would not fit its share
// of the memory at blocks small enough (IndexBound): then the warning
// names the memory that holds both. In one part that is past 10 TiB.
func TestNoWarningAtTheDefaultsForDataOf64FloorsOrMore(t *testing.T) {
	for _, objectStore := range []bool{false, true} {
		for size := 64 * Floor(objectStore); size <= 1<<50; size = size*3 + 7 {
			for _, k := range []int{1, 2, 8, 64, 1024} {
				in := Input{DatasetBytes: size, Parts: k, ObjectStore: objectStore, MaxMemory: gib}
				c := Choose(in)
				if c.Warning != "" && (!c.IndexBound || !strings.Contains(c.Warning, "keep the index")) {
					t.Fatalf("%d bytes, K=%d, object store %v: %s", size, k, objectStore, c.Warning)
				}
				if c.Warning != "" && k == 1 && size < 10<<40 {
					t.Fatalf("%d bytes in one part, object store %v: %s", size, objectStore, c.Warning)
				}
				if c.BlocksPerBuffer > 0 && !c.WholePart && size/c.BlockSize > gib/IndexShare/40+1 {
					t.Fatalf("%d bytes, K=%d: %d blocks of %d, an index over its share", size, k, size/c.BlockSize, c.BlockSize)
				}
			}
		}
	}
}

// TestTheWarnedMemoryNeedsNoWarning: the --max-memory a warning names
// gives a buffer of MinBlocks blocks, and a little less does not.
func TestTheWarnedMemoryNeedsNoWarning(t *testing.T) {
	for _, in := range []Input{
		{DatasetBytes: gib, Parts: 64, MaxMemory: 64 * mib},
		{DatasetBytes: 10 * gib, Parts: 1, MaxMemory: 128 * mib, ObjectStore: true},
		{DatasetBytes: 1 << 44, Parts: 64, MaxMemory: gib},
	} {
		if Choose(in).Warning == "" {
			t.Fatalf("%+v: no warning", in)
		}
		m := memoryForMinBlocks(in)
		in.MaxMemory = m
		if w := Choose(in).Warning; w != "" {
			t.Fatalf("at the named %d: %s", m, w)
		}
		in.MaxMemory = m - m/100
		if Choose(in).Warning == "" {
			t.Fatalf("1%% under the named %d: no warning, so it was not the smallest", m)
		}
	}
}
