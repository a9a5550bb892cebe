package blockcache

import (
	"fmt"
	"syscall"

	"github.com/corgifs/corgifs/index"
	"github.com/dustin/go-humanize"
)

// tooManyLearned refuses a block of a probed index, cut by bytes only,
// whose n records, learned as it loaded, would take more heap in tables
// (index.LoadedRecordBytes each) than the block's own e.n bytes, past the
// index.MaxBlockRecords that a full index allows any block: records of
// under 32 bytes on average, such as empty TFRecords or short lines. A
// full index cuts such a block at index.MaxBlockRecords records, so that
// what the daemon keeps per loaded block stays bounded; a probed block
// that holds no more than its bytes in tables stays within what the
// memory split assumes of the slabs.
func tooManyLearned(ix *index.Index, e extent, n int) error {
	tables := int64(n) * index.LoadedRecordBytes
	if n <= index.MaxBlockRecords || tables <= e.n {
		return nil
	}
	return fmt.Errorf("%s at offset %d: this block of a probed index holds %d records in %d bytes, whose tables would take %s of memory, more than the block itself: a probed index cuts blocks by bytes only and learns their records as it loads them; index with --index full, which also ends a block once it holds %d records, or mount with a smaller --block-size (at most %d bytes a block for records this small): %w",
		ix.Path(e.file), e.off, n, e.n, humanize.IBytes(uint64(tables)), index.MaxBlockRecords, int64(index.MaxBlockRecords)*e.n/int64(n), syscall.EIO)
}
