package fs

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// mountCause says why a mount by a user other than root most likely
// failed, and what fixes it, or "" when nothing it checks is amiss.
// go-fuse reports such a failure as fusermount's exit status ("fusermount
// exited with code 256"), and the reason fusermount printed reaches only
// the daemon's log: the checks below are the usual ones, named with their
// remedy. Root mounts with mount(2) directly and needs none of them.
func mountCause(allowOther bool) string {
	if os.Geteuid() == 0 {
		return ""
	}
	if err := unix.Access("/dev/fuse", unix.R_OK|unix.W_OK); err != nil {
		return fmt.Sprintf("/dev/fuse cannot be opened for reading and writing by uid %d (%v): make it mode 0666 (Debian's default; containers often make it root-only) or run as root", os.Geteuid(), err)
	}
	path, err := exec.LookPath("fusermount3")
	if err != nil {
		if path, err = exec.LookPath("fusermount"); err != nil {
			return "fusermount3 is not on PATH: install fuse3 (Debian: apt-get install fuse3)"
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSetuid == 0 {
		return fmt.Sprintf("%s is not setuid root, so a user other than root cannot mount with it: chmod u+s %s (as root), or run as root", path, path)
	}
	if allowOther {
		b, _ := os.ReadFile("/etc/fuse.conf")
		allowed := false
		for _, l := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(l) == "user_allow_other" {
				allowed = true
			}
		}
		if !allowed {
			return "{allow-other} needs user_allow_other in /etc/fuse.conf for a user other than root: add that line (as root), or leave {allow-other} out"
		}
	}
	return ""
}
