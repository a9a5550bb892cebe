package mount

import (
	"testing"

	"github.com/corgifs/corgifs/index"
)

// indexOf is an index of records records holding bytes bytes in all,
// which is all MemorySplit reads of one.
func indexOf(records, bytes int64) *index.Index {
	return &index.Index{Records: records, Bytes: bytes}
}

func TestMemorySplitGivesSlabsAllOfMaxMemoryLessTheIndexEstimate(t *testing.T) {
	// 1,000 records of 1 MiB: the fixed costs (requests, GC room, the
	// binary) take the 64 MiB beyond --max-memory; the slabs give up only
	// the index's 4 bytes and the tables' tableBytes a record.
	ix := indexOf(1000, 1000<<20)
	for _, m := range []int64{64 << 20, 1 << 30} {
		slabs, heap := MemorySplit(ix, m, false)
		if want := (4 + tableBytes) * ix.Records; slabs > m || m-slabs > want {
			t.Errorf("MemorySplit(%d): slabs %d, want all of it but at most %d bytes", m, slabs, want)
		}
		if heap < gcRoom {
			t.Errorf("MemorySplit(%d): heap limit %d, below the room to collect in (%d)", m, heap, gcRoom)
		}
	}
}

func TestMemorySplitKeepsTheProcessWithinMaxMemoryPlus64MiB(t *testing.T) {
	// 100M records of 16 bytes: the index (400 MB) alone passes the
	// allowance, so the slabs get less than --max-memory.
	for _, rec := range []bool{false, true} {
		ix := indexOf(100_000_000, 1_600_000_000)
		for _, m := range []int64{256 << 20, 1 << 30, 4 << 30, 16 << 30} {
			slabs, heap := MemorySplit(ix, m, rec)
			if slabs < 0 || slabs > m {
				t.Fatalf("records %v, max %d: slabs %d outside [0, max]", rec, m, slabs)
			}
			if slabs == 0 {
				continue // the index alone does not fit: the mount refuses (MinMaxMemory)
			}
			// The heap's limit, the slabs and the rest of the process.
			if total := slabs + heap + outsideHeap; total > m+64<<20 {
				t.Errorf("records %v, max %d: slabs %d + heap %d + %d = %d, past max + 64 MiB", rec, m, slabs, heap, outsideHeap, total)
			}
		}
	}
}

func TestMemorySplitGivesRecordStrategiesLessForTheirPlans(t *testing.T) {
	ix := indexOf(10_000_000, 1<<30)
	blocks, _ := MemorySplit(ix, 1<<30, false)
	records, _ := MemorySplit(ix, 1<<30, true)
	if records >= blocks {
		t.Errorf("slabs of a record strategy %d, of a block strategy %d: want fewer (16 bytes a record of plans)", records, blocks)
	}
}

func TestMemorySplitNeverGivesLessForMoreMemory(t *testing.T) {
	ix := indexOf(5_000_000, 200<<20)
	prev := int64(-1)
	for m := int64(0); m <= 512<<20; m += 7 << 20 {
		slabs, _ := MemorySplit(ix, m, true)
		if slabs < prev {
			t.Fatalf("MemorySplit(%d) = %d, less than %d at less memory", m, slabs, prev)
		}
		prev = slabs
	}
}

func TestMinMaxMemoryIsTheSmallestThatHoldsWhatIsNeeded(t *testing.T) {
	for _, ix := range []*index.Index{indexOf(0, 0), indexOf(1000, 1<<30), indexOf(50_000_000, 800<<20)} {
		for _, need := range []int64{1, 8 << 20, 300 << 20} {
			m := MinMaxMemory(ix, need, false)
			if slabs, _ := MemorySplit(ix, m, false); slabs < need {
				t.Errorf("records %d, need %d: MinMaxMemory %d gives slabs %d", ix.Records, need, m, slabs)
			}
			if slabs, _ := MemorySplit(ix, m-1, false); slabs >= need {
				t.Errorf("records %d, need %d: %d bytes less than MinMaxMemory (%d) suffice", ix.Records, need, 1, m)
			}
		}
	}
}
