package blockcache

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/zaccess"
)

// compressed says whether any of exts is of a compressed file.
func (l *Loader) compressed(exts []extent) bool {
	return slices.ContainsFunc(exts, func(e extent) bool { return l.ix.Files[e.file].Access != nil })
}

// readCompressedExtent fills extent e of a compressed file, whose offsets
// are in its decompressed stream, by decompressing from the access point
// before it: no decompressed copy of the file exists. It calls check as
// readExtent does.
func (l *Loader) readCompressedExtent(files *fileSet, dc *zaccess.Decoder, e extent, slab []byte, record bool, check func(int64) error) error {
	fl := &l.ix.Files[e.file]
	f, err := files.acquire(e.file, e.off)
	if err != nil {
		return err
	}
	defer files.release(f)
	from := fl.Access.PointBefore(e.off)
	start := fl.Access.InputStart(from)
	var src io.ReaderAt = f
	if pc, ok := f.File.(source.PageCached); ok {
		pc.WillNeed(start, fl.Access.InputEnd(e.off+e.n, fl.Size)-start)
	} else {
		// Each ReadAt of a remote file is a request: the first reads
		// the stretch to the next access point and a little more, for
		// the record across it; more follow if the extent needs them.
		end := fl.Access.InputEnd(from+1, fl.Size)
		src = &index.BufferedAt{R: f, Size: fl.Size, First: end - start + 64<<10, Piece: 256 << 10}
	}
	err = dc.ReadAt(fl.Access, src, fl.Size, slab[e.at:e.at+e.n], e.off, func(n int) error { return check(int64(n)) })
	if err != nil {
		if errors.Is(err, syscall.EIO) {
			return err // check's, which says what it found
		}
		// A changed file is not damage: the next Open sees its new
		// version and indexes it again, alone.
		err = fmt.Errorf("read %s (%s) at decompressed offset %d, from its access point at %d: %w: %w", l.ix.Path(e.file), fl.Access.Kind, e.off, fl.Access.PointBefore(e.off), err, syscall.EIO)
		var fe *zaccess.FormatError
		if errors.As(err, &fe) {
			l.damaged(err)
		}
		return err
	}
	l.counted(e.n, record)
	return nil
}

// decoder is a loader worker's zaccess.Decoder, taken from the loader's
// pool when first needed.
type decoder struct{ dc *zaccess.Decoder }

func (d *decoder) get(l *Loader) *zaccess.Decoder {
	if d.dc == nil {
		d.dc, _ = l.fetch.decoders.Get().(*zaccess.Decoder)
		if d.dc == nil {
			d.dc = new(zaccess.Decoder)
		}
	}
	return d.dc
}

func (d *decoder) put(l *Loader) {
	if d.dc != nil {
		l.fetch.decoders.Put(d.dc)
	}
}

// decodeOrder returns the order to read the single records exts in: by
// file and offset, so that a worker's decoder decodes on from one record
// to the next of the same stretch between access points instead of
// starting again at the access point for each.
func decodeOrder(exts []extent) []int {
	order := make([]int, len(exts))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(exts[a].file, exts[b].file); c != 0 {
			return c
		}
		return cmp.Compare(exts[a].off, exts[b].off)
	})
	return order
}
