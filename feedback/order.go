package feedback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
)

// An order file holds orderMagic, then the little-endian uint32s of the
// count and of the CRC-32C of the ids, then the ids as little-endian
// int32s.
const orderMagic = "CGOR"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// orderName is the file of the order name; names are single path elements
// of letters, digits, '-', '_' and '.', not starting with '.'.
func orderName(name string) (string, error) {
	if name == "" || name[0] == '.' || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return "", fmt.Errorf("feedback: order name %q: use letters, digits, '-', '_' and '.'", name)
	}
	return "order-" + name, nil
}

// SaveOrder keeps ids as the order name (for example one part of one
// epoch), in the store's directory, so that LoadOrder finds it after a
// remount. A saved order is replaced atomically.
func (s *Store) SaveOrder(name string, ids []int32) error {
	file, err := orderName(name)
	if err != nil {
		return err
	}
	b := make([]byte, 12+4*len(ids))
	copy(b, orderMagic)
	for i, id := range ids {
		binary.LittleEndian.PutUint32(b[12+4*i:], uint32(id))
	}
	binary.LittleEndian.PutUint32(b[4:], uint32(len(ids)))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[12:], castagnoli))
	if err := s.dir.WriteFile(file, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}); err != nil {
		return fmt.Errorf("feedback: save order %s: %w", name, err)
	}
	return nil
}

// LoadOrder returns the order saved as name. A missing order gives false;
// a damaged one, or one naming a record the dataset does not hold, is
// logged and gives false too (the caller computes it again).
func (s *Store) LoadOrder(name string) ([]int32, bool) {
	file, err := orderName(name)
	if err != nil {
		s.log.Error("feedback: load order", "err", err)
		return nil, false
	}
	b, err := s.dir.ReadFile(file, 12+4*(2*s.records+1<<20))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case len(b) < 12 || string(b[:4]) != orderMagic:
		why = "not an order file"
	case int64(binary.LittleEndian.Uint32(b[4:]))*4 != int64(len(b)-12):
		why = fmt.Sprintf("holds %d bytes of ids, not the %d its header says", len(b)-12, binary.LittleEndian.Uint32(b[4:])*4)
	case crc32.Checksum(b[12:], castagnoli) != binary.LittleEndian.Uint32(b[8:]):
		why = "checksum mismatch"
	}
	var ids []int32
	if why == "" {
		ids = make([]int32, (len(b)-12)/4)
		for i := range ids {
			ids[i] = int32(binary.LittleEndian.Uint32(b[12+4*i:]))
			if ids[i] < 0 || int64(ids[i]) >= s.records {
				why = fmt.Sprintf("names record %d, which the dataset of %d records does not hold", ids[i], s.records)
				break
			}
		}
	}
	if why != "" {
		s.log.Error("feedback: ignoring a saved order; it will be computed again", "order", name, "dir", s.dir.Path(), "reason", why)
		return nil, false
	}
	return ids, true
}
