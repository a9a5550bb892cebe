package formats

import (
	"fmt"
	"hash/crc32"
	"io"
)

// Text, tar payloads and binary rows carry no checksum of their own, so
// a byte that changes or rots in the source after indexing would be
// served as if it were good. For those formats (Format.Checksummed false)
// the index keeps the CRC32C (Castagnoli) of every block's stored bytes,
// computed in the indexing pass with a BlockSummer, and the loader checks
// it with UpdateChecksum as the block's bytes arrive: a mismatch is EIO
// with the file and the block's offset, never wrong bytes. CRC32C runs at
// several GB/s with the SSE4.2 and ARMv8 instructions Go uses, well above
// disk speed.

// UpdateChecksum returns crc updated with the bytes of b; start from 0.
// The CRC of a block is the same whether it is computed at once or piece
// by piece, as the bytes of a block arrive.
func UpdateChecksum(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// BlockSummer computes the CRC32C of byte ranges of a file, for the
// index to store per block.
type BlockSummer struct {
	r   io.ReaderAt
	buf []byte
}

// NewBlockSummer returns a BlockSummer reading r. Index a file and sum
// its blocks through the same read-ahead reader, record by record as the
// scanner returns them (Update), so that the bytes just scanned are
// summed from memory and the file is still read once, front to back.
func NewBlockSummer(r io.ReaderAt) *BlockSummer {
	return &BlockSummer{r: r, buf: make([]byte, 1<<20)}
}

// Sum returns the CRC32C of the n bytes at off.
func (s *BlockSummer) Sum(off, n int64) (uint32, error) { return s.Update(0, off, n) }

// Update returns crc updated with the n bytes at off: the CRC of a block
// is Update applied to each of its records in order, starting from 0.
func (s *BlockSummer) Update(crc uint32, off, n int64) (uint32, error) {
	for n > 0 {
		b := s.buf[:min(n, int64(len(s.buf)))]
		k, err := s.r.ReadAt(b, off)
		if k < len(b) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("checksum the block at offset %d: %w", off, err)
		}
		crc = UpdateChecksum(crc, b)
		off += int64(k)
		n -= int64(k)
	}
	return crc, nil
}
