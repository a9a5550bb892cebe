package diskcache

// The layout of an entry (see the package's comment in diskcache.go): its
// header, where its data starts, and the checks of a header read back.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
)

// pagedMin is the length from which an extent's entry is laid out in
// pages: its header padded to a page, its data at the block's offset
// within a page, so that it can be read with O_DIRECT into a loader's
// slab. A loader places blocks that way from index.MinDirectBlock on;
// blocks are cut at record boundaries, so those of such an index may be a
// little shorter, and half of it keeps them. A shorter extent's entry is
// compact (its data right after its key): a page of padding would double
// the entry of a block of a few KiB.
const pagedMin = index.MinDirectBlock / 2

// layout returns the bytes of the entry of extent e under a key of keyLen
// bytes before its lead (the header, padded to a page if paged), and its
// lead: the zeros between the header and the data, the offset of e's first
// byte within its page in its source file, as in a loader's slab that
// reads directly (blockcache's placeBlock); 0 for a compact entry.
func layout(keyLen int, e Extent) (header, lead int) {
	if e.Len < pagedMin {
		return diskHeader + keyLen, 0
	}
	return int(index.AlignUp(int64(diskHeader + keyLen))), int(e.Off - index.AlignDown(e.Off))
}

// entrySize is the size of the file of the entry of extent e under a key
// of keyLen bytes.
func entrySize(keyLen int, e Extent) int64 {
	h, lead := layout(keyLen, e)
	return int64(h+lead) + e.Len
}

// putHeader fills hdr, the bytes before the data of the entry of extent e
// under key (layout), with its header and padding.
func putHeader(hdr, key []byte, e Extent, crc uint32) {
	_, lead := layout(len(key), e)
	clear(hdr)
	copy(hdr, diskMagic)
	binary.LittleEndian.PutUint32(hdr[8:], crc)
	binary.LittleEndian.PutUint32(hdr[12:], uint32(len(key)))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(e.Len))
	binary.LittleEndian.PutUint32(hdr[24:], uint32(lead))
	copy(hdr[diskHeader:], key)
}

// checkHeader checks hdr, the header bytes read from the start of an
// entry (layout), and pad, the lead bytes before its data, for an entry of
// extent e under key; it returns the CRC32C the header holds, and why the
// entry cannot be used, or "".
func checkHeader(hdr, pad, key []byte, e Extent) (uint32, string) {
	_, want := layout(len(key), e)
	if string(hdr[:8]) != diskMagic {
		return 0, "not an entry of this format (bad magic)"
	}
	crc := binary.LittleEndian.Uint32(hdr[8:])
	klen := binary.LittleEndian.Uint32(hdr[12:])
	dlen := binary.LittleEndian.Uint64(hdr[16:])
	lead := binary.LittleEndian.Uint32(hdr[24:])
	if int(klen) != len(key) || !bytes.Equal(hdr[diskHeader:diskHeader+len(key)], key) {
		return 0, "holds another block (key differs)"
	}
	if dlen != uint64(e.Len) {
		return 0, fmt.Sprintf("holds %d bytes, the block has %d", dlen, e.Len)
	}
	if int(lead) != want {
		return 0, fmt.Sprintf("its data starts %d bytes into a page, want %d", lead, want)
	}
	if !zeros(hdr[diskHeader+len(key):]) || !zeros(pad) {
		return 0, "its padding is not zeros"
	}
	return crc, ""
}

func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// headers are page-aligned buffers for the headers of entries read with
// O_DIRECT, two pages each (a header and a lead), kept from read to read.
type headers struct{ pool sync.Pool }

// headerBufSize is what headers hands out: the header of any key up to
// a page less the fixed fields, and a lead.
const headerBufSize = 2 * source.DirectAlign

// get returns a page-aligned buffer of at least n bytes, and whether it
// came from the pool (then to be given back with put).
func (h *headers) get(n int) (*[]byte, bool) {
	if n <= headerBufSize {
		if b, ok := h.pool.Get().(*[]byte); ok {
			return b, true
		}
		b := alignedBytes(headerBufSize)
		return &b, true
	}
	b := alignedBytes(n)
	return &b, false
}

func (h *headers) put(b *[]byte) { h.pool.Put(b) }

// alignedBytes returns n bytes of the Go heap starting at a page boundary
// (the heap does not move its objects, so a direct read may fill them).
func alignedBytes(n int) []byte {
	b := make([]byte, n+source.DirectAlign)
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (source.DirectAlign - 1))
	return b[skip : skip+n : skip+n]
}
