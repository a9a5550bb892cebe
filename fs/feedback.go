package fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/shuffler"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The feedback channel, the order server's input. When Config.Feedback is
// set (a feedback strategy serves), .corgifs/feedback/epoch-EEEE/ holds the
// mount's only writable files: part-IIIII-of-KKKKK.f32, one per part a
// trainer read, with one vector per record it served (feedback.Upload
// checks them). Creating one starts an upload, writes go to it at their
// offsets, and the first close(2) checks it: close fails (EBADMSG, EFBIG
// past the budget) when it is refused, and status.json says why. The
// files are never listed nor looked up, so that every open for writing
// reaches Create and starts a new upload; an accepted part is final.
const (
	feedbackDir = api.FeedbackDir
	feedbackExt = api.FeedbackExt
	statusJSON  = api.StatusFile
)

// fbDirNode is .corgifs/feedback.
type fbDirNode struct {
	gofs.Inode
	readOnly
	counted
	root *rootNode
}

var (
	_ gofs.NodeLookuper  = (*fbDirNode)(nil)
	_ gofs.NodeReaddirer = (*fbDirNode)(nil)
	_ gofs.NodeGetattrer = (*fbDirNode)(nil)
	_ gofs.NodeCreater   = (*fbDirNode)(nil)
)

func (d *fbDirNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.root.dirAttr(&out.Attr, 0o555)
	return 0
}

func (d *fbDirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream([]fuse.DirEntry{{Name: statusJSON, Mode: syscall.S_IFREG}}), 0
}

func (d *fbDirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if name == statusJSON {
		return d.root.lookupCtlFile(ctx, &d.Inode, name, d.root.feedbackStatus, out), 0
	}
	e, ok := parseEpoch(name)
	if !ok {
		// Said in status.json and the log: a trainer that writes to a
		// misnamed directory otherwise sees only ENOENT. Not for users who
		// may not write feedback, whose lookups would only crowd out the
		// writers' refusals.
		if uid, ok := d.root.feedbackCaller(ctx); ok {
			d.root.cfg.Feedback.RefuseBy(uid, -1, -1, -1, feedbackDir+"/"+name, "unknown epoch: feedback goes in "+feedbackDir+"/epoch-EEEE (four or more decimal digits, as the epoch directories are named)")
		}
		return nil, syscall.ENOENT
	}
	// Writable directories, so that a trainer's access(W_OK) check passes.
	in := d.root.lookupDir(ctx, &d.Inode, name, &fbEpochNode{counted: counted{&d.root.inodes}, root: d.root, epoch: e}, 0o755, false, out)
	d.root.epochDirAttr(&out.Attr)
	return in, 0
}

// Create refuses a file beside the epoch directories, with a status entry
// that says where feedback files go.
func (d *fbDirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	uid, ok := d.root.feedbackCaller(ctx)
	if !ok {
		return nil, nil, 0, d.root.refuseCaller(uid, -1, -1, -1, feedbackDir+"/"+name)
	}
	d.root.cfg.Feedback.RefuseBy(uid, -1, -1, -1, feedbackDir+"/"+name, "not a feedback file: they go in "+feedbackDir+"/epoch-EEEE/part-IIIII-of-KKKKK"+feedbackExt)
	return nil, nil, 0, syscall.EINVAL
}

func (r *rootNode) feedbackStatus() []byte {
	b, err := r.cfg.Feedback.StatusJSON()
	if err != nil {
		r.cfg.Logger.Error("feedback status", "err", err)
	}
	return b
}

// fbEpochNode is .corgifs/feedback/epoch-EEEE.
type fbEpochNode struct {
	gofs.Inode
	readOnly
	counted
	root  *rootNode
	epoch int
}

var (
	_ gofs.NodeLookuper  = (*fbEpochNode)(nil)
	_ gofs.NodeReaddirer = (*fbEpochNode)(nil)
	_ gofs.NodeGetattrer = (*fbEpochNode)(nil)
	_ gofs.NodeCreater   = (*fbEpochNode)(nil)
)

func (d *fbEpochNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.root.epochDirAttr(&out.Attr)
	return 0
}

func (d *fbEpochNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(nil), 0
}

// Lookup finds nothing: see the comment on feedbackDir.
func (d *fbEpochNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.ENOENT
}

func (d *fbEpochNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	fb := d.root.cfg.Feedback
	// Who asks is checked first: a user who may not write feedback learns
	// nothing about names and epochs.
	uid, ok := d.root.feedbackCaller(ctx)
	if !ok {
		return nil, nil, 0, d.root.refuseCaller(uid, d.epoch, -1, -1, name)
	}
	i, k, ok := parsePart(name, feedbackExt)
	if !ok {
		fb.RefuseBy(uid, d.epoch, -1, -1, name, fmt.Sprintf("unknown part: a feedback file is named part-IIIII-of-KKKKK%s with I < K <= %d", feedbackExt, MaxParts))
		return nil, nil, 0, syscall.EINVAL
	}
	h, errno := d.root.beginFeedback(uid, d.epoch, i, k, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	n := &fbFileNode{counted: counted{&d.root.inodes}, root: d.root, epoch: d.epoch, part: i, parts: k}
	n.attr(&out.Attr)
	// No entry timeout: the kernel asks Lookup again, which finds nothing,
	// so the next open for writing reaches Create.
	return d.NewInode(ctx, n, gofs.StableAttr{Mode: syscall.S_IFREG}), h, fuse.FOPEN_DIRECT_IO, 0
}

// beginFeedback starts the upload of part of parts in epoch for an open
// with flags by uid, a user who may write feedback.
func (r *rootNode) beginFeedback(uid uint32, epoch, part, parts int, flags uint32) (*fbHandle, syscall.Errno) {
	fb := r.cfg.Feedback
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		fb.RefuseBy(uid, epoch, part, parts, "", "opened for reading: feedback files are written, never read back (status.json says what arrived)")
		return nil, syscall.EACCES
	}
	if flags&syscall.O_APPEND != 0 {
		fb.RefuseBy(uid, epoch, part, parts, "", "opened with O_APPEND: write the file from offset 0 (open it with \"wb\")")
		return nil, syscall.EINVAL
	}
	// Acquire of an epoch not yet served would wait for the previous
	// epoch's feedback and then fix this epoch's order: refuse at once.
	if !r.cfg.Planner.Fixed(epoch, parts) {
		fb.RefuseBy(uid, epoch, part, parts, "", fmt.Sprintf("epoch %d has not been served yet: its order depends on epoch %d's feedback, not complete yet; write feedback for an epoch after reading it", epoch, epoch-1))
		return nil, syscall.EINVAL
	}
	plan, err := r.cfg.Planner.Acquire(epoch, part, parts)
	if err != nil {
		fb.RefuseBy(uid, epoch, part, parts, "", fmt.Sprintf("no plan for this part: %v", err))
		return nil, syscall.EINVAL
	}
	ids := make([]int32, 0, plan.Records)
	err = r.cfg.Planner.Walk(context.Background(), plan, func(rec shuffler.RecordRef) error {
		ids = append(ids, rec.ID)
		return nil
	})
	r.cfg.Planner.Release(plan)
	if err != nil {
		fb.RefuseBy(uid, epoch, part, parts, "", fmt.Sprintf("no plan for this part: %v", err))
		return nil, syscall.EIO
	}
	u, err := fb.BeginBy(uid, epoch, part, parts, ids)
	if err != nil {
		return nil, errno(err)
	}
	return &fbHandle{u: u}, 0
}

// errno maps a refusal of the feedback store to what the writer sees.
func errno(err error) syscall.Errno {
	switch {
	case errors.Is(err, feedback.ErrTooLarge):
		return syscall.EFBIG
	case errors.Is(err, feedback.ErrClosed):
		return syscall.EBADF
	case errors.Is(err, feedback.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, feedback.ErrFinal):
		return syscall.EEXIST
	case errors.Is(err, feedback.ErrRefused):
		return syscall.EBADMSG
	}
	return syscall.EIO
}

// fbFileNode is a feedback file just created. It is never looked up again
// (see feedbackDir); an open that still reaches it starts a new upload.
type fbFileNode struct {
	gofs.Inode
	readOnly
	counted
	root               *rootNode
	epoch, part, parts int
}

var (
	_ gofs.NodeOpener    = (*fbFileNode)(nil)
	_ gofs.NodeGetattrer = (*fbFileNode)(nil)
	_ gofs.NodeSetattrer = (*fbFileNode)(nil)
)

func (n *fbFileNode) attr(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | 0o600
	a.Nlink = 1
	setTimes(a, n.root.mtime)
}

func (n *fbFileNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.attr(&out.Attr)
	out.SetTimeout(0)
	return 0
}

// Setattr takes a truncation to 0 (O_TRUNC, where the kernel sends it
// apart from the open) as the no-op it is for an upload, which starts
// empty; nothing else changes.
func (n *fbFileNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok && size == 0 && in.Valid&^(fuse.FATTR_SIZE|fuse.FATTR_FH|fuse.FATTR_LOCKOWNER) == 0 {
		n.attr(&out.Attr)
		return 0
	}
	return syscall.EROFS
}

func (n *fbFileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	uid, ok := n.root.feedbackCaller(ctx)
	if !ok {
		return nil, 0, n.root.refuseCaller(uid, n.epoch, n.part, n.parts, "")
	}
	h, errno := n.root.beginFeedback(uid, n.epoch, n.part, n.parts, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

// fbHandle is an open feedback file: an upload.
type fbHandle struct{ u *feedback.Upload }

var (
	_ gofs.FileWriter   = (*fbHandle)(nil)
	_ gofs.FileFlusher  = (*fbHandle)(nil)
	_ gofs.FileFsyncer  = (*fbHandle)(nil)
	_ gofs.FileReleaser = (*fbHandle)(nil)
)

func (h *fbHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.u.WriteAt(data, off)
	if err != nil {
		return uint32(n), errno(err)
	}
	return uint32(n), 0
}

// Flush, at the first close(2), checks the file, so that close reports a
// refusal.
func (h *fbHandle) Flush(ctx context.Context) syscall.Errno {
	if err := h.u.Close(); err != nil {
		return errno(err)
	}
	return 0
}

func (h *fbHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno { return 0 }

func (h *fbHandle) Release(ctx context.Context) syscall.Errno {
	h.u.Close()
	return 0
}
