package childmount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

func sysProcAttr(ownGroup bool) *syscall.SysProcAttr {
	// Pdeathsig: a parent killed by a test timeout or a ^C must not leave
	// a mount behind; the server unmounts on SIGTERM.
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: ownGroup}
}

// Mounted reports whether dir is a mount point, from the mount table: a
// dead FUSE mount (its server gone, every access ENOTCONN) is one too.
func Mounted(dir string) bool {
	path, err := mountPath(dir)
	if err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		// Fields: id, parent, major:minor, root, mount point, ...
		if f := strings.Fields(line); len(f) > 4 && unescape(f[4]) == path {
			return true
		}
	}
	return false
}

// mountPath makes dir absolute and resolves the symlinks of its parent,
// but not dir itself: the root of a dead FUSE mount fails every lookup.
func mountPath(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, filepath.Base(abs)), nil
}

// unescape undoes the octal escapes (\040 for a space) of mountinfo.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Detach lazily unmounts dir if it is mounted: at once for new accesses,
// for good once the last open file on it is closed. As root it calls
// umount2 itself; otherwise fusermount3 (or fusermount) does.
func Detach(dir string) error {
	if !Mounted(dir) {
		return nil
	}
	var direct error
	if os.Geteuid() == 0 {
		if direct = syscall.Unmount(dir, syscall.MNT_DETACH); direct == nil {
			return nil
		}
	}
	for _, prog := range []string{"fusermount3", "fusermount"} {
		out, err := exec.Command(prog, "-u", "-z", dir).CombinedOutput()
		if err == nil {
			return nil
		}
		if !errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("unmount %s: %s: %v: %s", dir, prog, err, strings.TrimSpace(string(out)))
		}
	}
	return fmt.Errorf("unmount %s: umount2: %v, and no fusermount3", dir, direct)
}
