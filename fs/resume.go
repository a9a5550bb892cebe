package fs

import (
	"context"
	"errors"
	"path"
	"sync"
	"syscall"

	"github.com/corgifs/corgifs/shuffler"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// A resume directory, epoch-EEEE/resume-TOKEN/, serves the records of the
// epoch that a checkpoint had not consumed, as part-J-of-K'.ext for any K'
// (shuffler/resume.go, docs/elastic.md). The name carries the checkpoint,
// so the mount stays read-only and every node resolves it alike. A token
// longer than shuffler.MaxTokenChunk continues in subdirectories named by
// its next pieces, each but the last exactly MaxTokenChunk long, so that
// a checkpoint has one path; resume-TOKEN2/ inside a resume directory is
// a resume of that resume's parts.
type resumeNode struct {
	gofs.Inode
	readOnly
	counted
	root  *rootNode
	epoch int
	chain []shuffler.ResumeToken // the complete checkpoints before this one
	token string                 // this checkpoint's token, so far
	chunk int                    // the length of the last piece of token

	once sync.Once
	res  *shuffler.Resume
	err  error
}

var (
	_ gofs.NodeLookuper    = (*resumeNode)(nil)
	_ gofs.NodeReaddirer   = (*resumeNode)(nil)
	_ gofs.NodeGetattrer   = (*resumeNode)(nil)
	_ gofs.NodeOnAdder     = (*resumeNode)(nil)
	_ gofs.NodeOnForgetter = (*resumeNode)(nil)
)

// lookupResume answers the lookup of name, resume-PIECE, in parent, of
// epoch, after the checkpoints of chain.
func (r *rootNode) lookupResume(ctx context.Context, parent *gofs.Inode, epoch int, chain []shuffler.ResumeToken, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	piece := name[len(shuffler.ResumePrefix):]
	if !shuffler.IsTokenChunk(piece) {
		return nil, syscall.ENOENT
	}
	n := &resumeNode{counted: counted{&r.inodes}, root: r, epoch: epoch, chain: chain, token: piece, chunk: len(piece)}
	// Cached like listed names: the node keeps the resume it resolved for
	// the K' workers that walk into it.
	return r.lookupDir(ctx, parent, name, n, 0o555, true, out), 0
}

func (d *resumeNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.root.dirAttr(&out.Attr, 0o555)
	return 0
}

// Readdir lists nothing: a resume has parts for every K'.
func (d *resumeNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(nil), 0
}

// checkpoint decodes the node's token, which must be complete.
func (d *resumeNode) checkpoint() (shuffler.ResumeToken, error) {
	return shuffler.ParseResumeToken(d.token, MaxParts)
}

// resume resolves the node's resume once.
func (d *resumeNode) resume() (*shuffler.Resume, error) {
	d.once.Do(func() {
		t, err := d.checkpoint()
		if err != nil {
			d.err = err
			return
		}
		d.res, d.err = d.root.cfg.Planner.Resume(d.epoch, append(d.chain[:len(d.chain):len(d.chain)], t)...)
	})
	return d.res, d.err
}

func (d *resumeNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	r := d.root
	if i, k, ok := parsePart(name, r.ext()); ok {
		res, err := d.resume()
		if err != nil {
			r.cfg.Logger.Warn("resume refused", "path", path.Join(shuffler.EpochName(d.epoch), "resume-…", name), "err", err)
			if errors.Is(err, shuffler.ErrNoResume) {
				return nil, syscall.EINVAL
			}
			return nil, syscall.ENOENT
		}
		plan, err := res.Plan(i, k)
		if err != nil {
			return nil, syscall.ENOENT
		}
		p := &partNode{counted: counted{&r.inodes}, root: r, epoch: d.epoch, part: i, parts: k, size: plan.Size, plan: plan}
		p.attr(&out.Attr)
		r.cacheName(&d.Inode, name, out, false)
		return d.NewInode(ctx, p, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
	}
	if len(name) > len(shuffler.ResumePrefix) && name[:len(shuffler.ResumePrefix)] == shuffler.ResumePrefix {
		t, err := d.checkpoint()
		if err != nil {
			return nil, syscall.ENOENT
		}
		return r.lookupResume(ctx, &d.Inode, d.epoch, append(d.chain[:len(d.chain):len(d.chain)], t), name, out)
	}
	// The next piece of a long token.
	if d.chunk != shuffler.MaxTokenChunk || !shuffler.IsTokenChunk(name) || len(d.token)+len(name) > shuffler.MaxTokenLen {
		return nil, syscall.ENOENT
	}
	n := &resumeNode{counted: counted{&r.inodes}, root: r, epoch: d.epoch, chain: d.chain, token: d.token + name, chunk: len(name)}
	return r.lookupDir(ctx, &d.Inode, name, n, 0o555, true, out), 0
}

// openStream returns a stream of the part: of its own plan, or of the
// plan the planner shares between the opens of the part.
func (p *partNode) openStream() (*shuffler.Stream, error) {
	if p.plan != nil {
		return shuffler.NewStream(p.root.cfg.Planner, p.root.cfg.Loader, p.plan), nil
	}
	return shuffler.OpenStream(p.root.cfg.Planner, p.root.cfg.Loader, p.epoch, p.part, p.parts)
}

// records returns the records the part serves, padding included.
func (p *partNode) records() (int64, error) {
	if p.plan != nil {
		return p.plan.Records, nil
	}
	return p.root.cfg.Planner.Records(p.epoch, p.part, p.parts)
}
