package blockcache

import (
	"fmt"
	"syscall"

	"github.com/corgifs/corgifs/index"
	"github.com/dustin/go-humanize"
)

// tooManyLearned refuses a block of a probed index, cut by bytes only,
// that a full index would have ended early by index.CapCuts: its first
// index.MaxBlockRecords records or more, whose starts (from the block's
// start) are starts, take more heap in tables than their own bytes. Such
// a block of very many tiny records (empty TFRecords, short lines) would
// keep tables of up to twice its bytes, or 32 times, beyond what the
// memory split allows; refusing it also keeps every block that both index
// modes serve the same block.
func tooManyLearned(ix *index.Index, e extent, starts []int64) error {
	for r := index.MaxBlockRecords; r < len(starts); r++ {
		if !index.CapCuts(int64(r), starts[r]) {
			continue
		}
		n := len(starts)
		tables := int64(n) * index.LoadedRecordBytes
		return fmt.Errorf("%s at offset %d: this block of a probed index holds %d records in %d bytes, whose tables would take %s of memory, more than the block itself: a probed index cuts blocks by bytes only and learns their records as it loads them; index with {index} full, which ends a block early where its records are this small (after %d of them), or mount with a smaller {block-size} (at most %d bytes a block for records this small): %w",
			ix.Path(e.file), e.off, n, e.n, humanize.IBytes(uint64(tables)), index.MaxBlockRecords, int64(index.MaxBlockRecords)*e.n/int64(n), syscall.EIO)
	}
	return nil
}
