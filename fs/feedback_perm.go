package fs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Who may write feedback. The mount does not ask the kernel to check
// permissions (no default_permissions), so with --allow-other every local
// user reaches the feedback tree, and an accepted file is final: it fixes
// the next epoch's order, and the owner's own upload of the part then
// fails. So corgifs checks the caller of every create and open itself:
// the mount's owner (the daemon's uid) and root may write feedback, and
// the members of Config.FeedbackGroup when it is set; anyone else gets
// EACCES and a refusal in status.json with their uid.

// caller returns the uid of the FUSE request in ctx, and whether the
// caller may write feedback.
func (r *rootNode) feedbackCaller(ctx context.Context) (uid uint32, ok bool) {
	c, found := fuse.FromContext(ctx)
	if !found {
		// go-fuse always gives a caller; without one, trust nobody.
		return ^uint32(0), false
	}
	if c.Uid == 0 || c.Uid == r.owner {
		return c.Uid, true
	}
	g := r.cfg.FeedbackGroup
	if g == nil {
		return c.Uid, false
	}
	return c.Uid, c.Gid == *g || inGroup(c.Pid, c.Uid, *g)
}

// notWriter is the reason a caller who may not write feedback is given.
func (r *rootNode) notWriter(uid uint32) string {
	if g := r.cfg.FeedbackGroup; g != nil {
		return fmt.Sprintf("uid %d may not write feedback: only the mount's owner (uid %d), root and the members of group %d ({feedback-group}) may", uid, r.owner, *g)
	}
	return fmt.Sprintf("uid %d may not write feedback: only the mount's owner (uid %d) and root may; mount with {feedback-group} GROUP to let a group's members write it", uid, r.owner)
}

// inGroup says whether the process pid, whose file-system uid is uid,
// holds gid among its supplementary groups, as /proc/PID/status says: the
// groups the kernel checks files against (a user's groups in /etc/group
// may differ from those of a process started before a change, or by
// setgroups). The fsuid is checked too, so that a pid reused by another
// user's process since the request grants nothing. A caller in another pid
// namespace (pid 0) is not a member.
func inGroup(pid, uid, gid uint32) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return false
	}
	var uidOK, member bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := bytes.Cut(sc.Bytes(), []byte(":"))
		f := bytes.Fields(v)
		switch string(k) {
		case "Uid": // real, effective, saved, file-system
			uidOK = len(f) == 4 && string(f[3]) == strconv.FormatUint(uint64(uid), 10)
		case "Groups":
			for _, x := range f {
				member = member || string(x) == strconv.FormatUint(uint64(gid), 10)
			}
		}
	}
	return uidOK && member
}

// epochDirAttr fills the attributes of a feedback epoch directory: writable
// by the owner, and by the group when one may write feedback, so that a
// trainer's access(W_OK) agrees with what Create allows.
func (r *rootNode) epochDirAttr(a *fuse.Attr) {
	if g := r.cfg.FeedbackGroup; g != nil {
		r.dirAttr(a, 0o775)
		a.Gid = *g
		return
	}
	r.dirAttr(a, 0o755)
}

// refuseCaller records the refusal of a caller who may not write feedback
// and returns EACCES.
func (r *rootNode) refuseCaller(uid uint32, epoch, part, parts int, name string) syscall.Errno {
	r.cfg.Feedback.RefuseBy(uid, epoch, part, parts, name, r.notWriter(uid))
	return syscall.EACCES
}
