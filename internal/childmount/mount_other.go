//go:build !linux

package childmount

import "syscall"

func sysProcAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}

// Mounted reports whether dir is a mount point; outside Linux it cannot
// tell, and says no.
func Mounted(dir string) bool { return false }

// Detach lazily unmounts dir if it is mounted; outside Linux it does nothing.
func Detach(dir string) error { return nil }
