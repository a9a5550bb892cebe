package mount

import (
	"runtime/debug"

	"github.com/corgifs/corgifs/fs"
	"github.com/corgifs/corgifs/index"
)

// LimitIndexHeap sets the Go heap's soft limit for indexing, before the
// mount sets its own: the index's tables take at most a quarter of
// maxMemory (index.TableBudget), and without a limit the heap could
// double between collections while they grow.
func LimitIndexHeap(maxMemory int64) {
	debug.SetMemoryLimit(maxMemory/2 + 32<<20)
}

// gcRoom is the Go heap's room to collect garbage in, beyond what
// MemorySplit estimates it holds; outsideHeap is the resident memory that
// is neither the heap nor the slabs: the binary's code and data (its
// pages resident as they run, measured 13-14 MiB) and the soft limit's
// overshoot. With 32 and 10 MiB, 64 readers of 1 KiB records at
// --max-memory 64MiB peaked at 124-130 MiB, at or past the stated
// --max-memory + 64 MiB; with these, at TestSixtyFourReadersStayWithinMaxMemoryPlus64MiB's
// figures (RELIABILITY.md). The slabs still get all of --max-memory
// while the index estimate is under 8 MiB.
const (
	gcRoom      = 24 << 20
	outsideHeap = 24 << 20
)

// tableBytes is the heap a record of a loaded buffer takes
// (index.LoadedRecordBytes). Measured on 4 million records of 4 bytes read
// by 4 readers at --max-memory 64MiB: 34-39 bytes for each record the
// slabs held, against the 16 counted before, which took the daemon past
// --max-memory + 64 MiB (RELIABILITY.md).
const tableBytes = index.LoadedRecordBytes

// MemorySplit divides maxMemory between the loader's slabs, which live
// outside the Go heap, and the heap, so that the daemon's resident size stays
// within maxMemory + 64 MiB. The heap holds the index (index.BlockHeapBytes
// a block, the frame lengths, 4 bytes a record; with record strategies also record offsets and two
// epochs' plans, 16 more), the record tables of loaded buffers and of the
// buffers parts serve (tableBytes for each record the slabs hold: twice
// the slabs themselves for records of 16 bytes), the reply buffers of
// the FUSE requests in flight (fs.RequestMemory, whatever the number of
// readers), and room to collect garbage in (gcRoom) beyond these is its
// soft limit. outsideHeap of the process is neither. The slabs get the
// most that keeps the sum within the bound, which may be less than the
// largest block: the mount then refuses, naming MinMaxMemory.
func MemorySplit(ix *index.Index, maxMemory int64, recordStrategy bool) (slabs, heapLimit int64) {
	// The record counts of a probed index that an earlier mount kept
	// (index.FillCounts) are left out: the slabs' share is the planner's
	// memory, which can lower the buffers, and the plan, and so the bytes
	// of every part, must be those of a mount that learns the counts as
	// blocks load, which knew only the probe's.
	records := ix.Records - ix.KeptRecords()
	index := 4*records + index.BlockHeapBytes*int64(len(ix.Blocks))
	if ix.RecordCRCs != nil {
		index += 4 * records // a CRC32C per record, for formats without checksums
	}
	if recordStrategy {
		index += 16 * records
	}
	// tables is the heap the record tables of s bytes of loaded blocks take.
	tables := func(s int64) int64 {
		if records <= 0 || ix.Bytes <= 0 {
			return 0
		}
		return tableBytes * min(records, s/max(1, ix.Bytes/records))
	}
	over := func(s int64) int64 { // what the heap and the rest take past the 64 MiB allowance
		return max(0, index+tables(s)+fs.RequestMemory+gcRoom+outsideHeap-64<<20)
	}
	// The largest s with s + over(s) <= maxMemory; both grow with s.
	lo, hi := int64(0), max(0, maxMemory)
	for lo < hi {
		mid := hi - (hi-lo)/2
		if mid+over(mid) <= maxMemory {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, index + tables(lo) + fs.RequestMemory + gcRoom
}

// MinMaxMemory returns the smallest --max-memory that gives the slabs at
// least need bytes: more memory never gives them less.
func MinMaxMemory(ix *index.Index, need int64, recordStrategy bool) int64 {
	lo, hi := need, 2*need
	for slabs, _ := MemorySplit(ix, hi, recordStrategy); slabs < need && hi < 1<<50; slabs, _ = MemorySplit(ix, hi, recordStrategy) {
		lo, hi = hi, 2*hi
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if slabs, _ := MemorySplit(ix, mid, recordStrategy); slabs >= need {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
