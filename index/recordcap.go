package index

import (
	"fmt"

	"github.com/corgifs/corgifs/formats"
	"github.com/dustin/go-humanize"
)

// MaxBlockRecords and LoadedRecordBytes bound the records of a block: a
// full index ends a block at the record boundary after a multiple of the
// block size (Cuts), or before a record that would follow MaxBlockRecords
// or more whose tables, LoadedRecordBytes each, take more than their own
// bytes (CapCuts): records under 32 bytes on average.
//
// What the daemon keeps for a loaded block grows with its records, not its
// bytes: LoadedRecordBytes a record. An 8 MiB block of empty TFRecords
// holds 512Ki records, 16 MiB of tables beside its 8 MiB, and the
// planner, which fills buffers up to a byte target with whole blocks,
// made a buffer meant for 4 MiB of one such block: 4 readers at
// --max-memory 64MiB took the daemon to 126-141 MiB
// (TestBlocksOfMillionsOfTinyRecordsStayWithinMaxMemoryPlus64MiB). So a
// block's tables are at most its bytes, or 2 MiB (64Ki records) for a
// block of fewer bytes than that; and 64Ki, not fewer, so that a block is
// cut this way only when its records are very small, where more, smaller
// blocks cost the index little (an entry a block against 4 bytes a
// record) and shuffle better. A probe, which learns the records of most
// formats only when their block loads, cannot make this cut: the loader
// refuses a probed block that a full index would have cut, so whenever
// both serve a block it is the same block.
const MaxBlockRecords = 1 << 16

// LoadedRecordBytes is the heap a record of a loaded block takes: its
// offset and length in the loader's Buf (12 bytes), and the permuted
// source and output offsets (16) and the permutation entry (4) of the
// stream that serves it.
const LoadedRecordBytes = 12 + 16 + 4

// BlockHeapBytes is the heap a block of the index takes while a mount
// serves it: its Block (32 bytes) and its entries in the epoch's block
// sequence and in the plans of the epochs held (4 bytes each). Measured on
// 1 GiB of 1 KiB records at 512 B, 4 KiB and 64 KiB blocks (1,048,576,
// 263,164 and 16,448 of them): 25-30 bytes a block of resident heap
// between collections; 40 leaves the collector its room.
const BlockHeapBytes = 40

// CapCuts reports whether a block that holds records records in bytes
// bytes ends before its next record (the rule of MaxBlockRecords).
func CapCuts(records, bytes int64) bool {
	return records >= MaxBlockRecords && records*LoadedRecordBytes > bytes
}

// TableBudget is the share of a memory budget (--max-memory) that a full
// index's per-record tables may take: a quarter, so that building them
// (slices grown by append, the sidecar's encoding) and the blocks loaded
// beside them stay within the budget and its stated margin; but at least
// minTables, which the margin of 64 MiB absorbs, so that a tiny budget
// is refused for what it is (smaller than a block) rather than here.
func TableBudget(maxMemory int64) int64 { return max(maxMemory/4, minTables) }

// minTables is the least TableBudget and RecordBudget give.
const minTables = 4 << 20

// RecordBudget is the longest record that indexing holds in memory to find
// its end, for a memory budget (--max-memory): a quarter of it, as the
// tables, so that the scan's buffer, grown by doubling, stays within the
// budget; never more than the formats' own limit of 256 MiB.
func RecordBudget(maxMemory int64) int64 { return min(max(maxMemory/4, minTables), 256<<20) }

// tableBytes is what a full index keeps in memory for each record of
// format f: its frame length, and its CRC32C for a format without
// checksums of its own.
func tableBytes(f formats.Format) int64 {
	if f.Checksummed() {
		return 4
	}
	return 8
}

// maxRecords is the most records a full index built with o may hold
// (Options.MaxTables), or 0 for no limit.
func maxRecords(o Options) int64 {
	if o.MaxTables <= 0 || o.counted == nil || o.Format == nil {
		return 0
	}
	return max(1, o.MaxTables/tableBytes(o.Format))
}

// tooManyRecords is the error of a scan that found more than limit
// records, the last at rec of the file named name.
func tooManyRecords(o Options, name string, limit int64, rec formats.Record) error {
	per := tableBytes(o.Format)
	return fmt.Errorf("index: %s: more than %d records by offset %d: the index keeps %d bytes a record in memory, and %d records take %s, the most that {max-memory} allows the index (a quarter of it, at least 4 MiB); a file of very many tiny or empty records (such as a decompression bomb) is refused here, before memory grows: if the records are wanted, raise {max-memory} (each GiB of it admits %d records of this format), else leave the file out with {include}",
		name, limit, rec.Offset, per, limit, humanize.IBytes(uint64(limit*per)), TableBudget(1<<30)/per)
}

// joinTables returns the per-record tables of the scans, table(sc), one
// after the other, and drops each scan's own: the only file's is returned
// as it is, and the others are copied into a table made once at its full
// length, not grown by append.
func joinTables(scans []fileScan, table func(*fileScan) *[]uint32) []uint32 {
	var n, nonEmpty int
	for i := range scans {
		if k := len(*table(&scans[i])); k > 0 {
			n += k
			nonEmpty++
		}
	}
	if n == 0 {
		return nil
	}
	if nonEmpty == 1 {
		for i := range scans {
			if t := table(&scans[i]); len(*t) > 0 {
				out := *t
				*t = nil
				return out
			}
		}
	}
	out := make([]uint32, 0, n)
	for i := range scans {
		t := table(&scans[i])
		out = append(out, *t...)
		*t = nil
	}
	return out
}

// frameStats returns the smallest, the median (the element at len/2 in
// sorted order) and the largest of frames, which must not be empty, with
// two counting passes over them instead of a sorted copy: 4 bytes a record
// more would be the largest allocation of the index.
func frameStats(frames []uint32) (lo, median, hi uint32) {
	lo, hi = frames[0], frames[0]
	var counts [1 << 16]int
	for _, v := range frames {
		lo, hi = min(lo, v), max(hi, v)
		counts[v>>16]++
	}
	rank := len(frames) / 2
	var top uint32
	for i, c := range counts {
		if rank < c {
			top = uint32(i)
			break
		}
		rank -= c
	}
	counts = [1 << 16]int{}
	for _, v := range frames {
		if v>>16 == top {
			counts[v&0xffff]++
		}
	}
	for i, c := range counts {
		if rank < c {
			return lo, top<<16 | uint32(i), hi
		}
		rank -= c
	}
	panic("blockcache: frameStats: median not found")
}

// recordTooLong is the error of a scan of the file named name that found
// a record longer than Options.MaxRecord.
func recordTooLong(name string, le *formats.LongRecordError) error {
	return fmt.Errorf("index: %s: %w: a record may be at most %s, a quarter of {max-memory} (at least 4 MiB, at most 256 MiB), and the scan stops there rather than holding more: if the file's records are that long, raise {max-memory} (to at least %s for a record of %s); if it has no line ends where they belong, it is not a file of this format: fix it or leave it out with {include}",
		name, le, humanize.IBytes(uint64(le.Max)), humanize.IBytes(uint64(8*le.Max)), humanize.IBytes(uint64(2*le.Max)))
}

// checkTables refuses a cached index (nil passes) whose per-record tables
// take more than o.MaxTables: one built under a larger --max-memory.
func (ix *Index) checkTables(o Options) error {
	if ix == nil || ix.Probed || o.MaxTables <= 0 {
		return nil
	}
	per := tableBytes(ix.Fmt())
	if limit := max(1, o.MaxTables/per); ix.Records > limit {
		return fmt.Errorf("index of %s: %d records, whose tables take %s (%d bytes a record), more than {max-memory} allows the index (a quarter of it, at least 4 MiB: %d records): raise {max-memory} (each GiB of it admits %d records of this format)",
			ix.Root, ix.Records, humanize.IBytes(uint64(ix.Records*per)), per, limit, TableBudget(1<<30)/per)
	}
	return nil
}
