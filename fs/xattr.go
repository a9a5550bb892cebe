package fs

import (
	"context"
	"strconv"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// RecordsXattr is the extended attribute of a part file that holds the
// records the part serves, padding included, in decimal: a trainer's
// steps per epoch come from it (the Python package's len()) without
// reading the part. Absent (ENODATA) when a probed index does not know the
// count yet.
const RecordsXattr = "user.corgifs.records"

var (
	_ gofs.NodeGetxattrer  = (*partNode)(nil)
	_ gofs.NodeListxattrer = (*partNode)(nil)
)

func (p *partNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr != RecordsXattr {
		return 0, syscall.ENODATA
	}
	n, err := p.records()
	if err != nil || n < 0 {
		return 0, syscall.ENODATA
	}
	return xattrValue(dest, strconv.AppendInt(nil, n, 10))
}

func (p *partNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return xattrValue(dest, append([]byte(RecordsXattr), 0))
}

// xattrValue copies v into dest, or says how large dest must be (a size
// query passes an empty dest; a short one gets ERANGE).
func xattrValue(dest, v []byte) (uint32, syscall.Errno) {
	if len(dest) == 0 {
		return uint32(len(v)), 0
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}
