package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// readOnly answers EROFS to every call that would change the tree. Every
// node embeds it: a mount that takes feedback is mounted read-write, so
// the kernel no longer refuses these calls itself, and go-fuse answers
// some of them (Unlink, Rmdir) with success for a node that does not
// implement them. The feedback nodes override the calls they take.
type readOnly struct{}

var (
	_ gofs.NodeSetattrer     = readOnly{}
	_ gofs.NodeMkdirer       = readOnly{}
	_ gofs.NodeMknoder       = readOnly{}
	_ gofs.NodeLinker        = readOnly{}
	_ gofs.NodeSymlinker     = readOnly{}
	_ gofs.NodeCreater       = readOnly{}
	_ gofs.NodeTmpfiler      = readOnly{}
	_ gofs.NodeUnlinker      = readOnly{}
	_ gofs.NodeRmdirer       = readOnly{}
	_ gofs.NodeRenamer       = readOnly{}
	_ gofs.NodeSetxattrer    = readOnly{}
	_ gofs.NodeRemovexattrer = readOnly{}
)

func (readOnly) Setattr(context.Context, gofs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (readOnly) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnly) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnly) Link(context.Context, gofs.InodeEmbedder, string, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnly) Symlink(context.Context, string, string, *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnly) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

func (readOnly) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

func (readOnly) Unlink(context.Context, string) syscall.Errno { return syscall.EROFS }
func (readOnly) Rmdir(context.Context, string) syscall.Errno  { return syscall.EROFS }

func (readOnly) Rename(context.Context, string, gofs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EROFS
}

func (readOnly) Setxattr(context.Context, string, []byte, uint32) syscall.Errno {
	return syscall.EROFS
}

func (readOnly) Removexattr(context.Context, string) syscall.Errno { return syscall.EROFS }
