package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/corgifs/corgifs/fs"
)

// refuseLiveMount says so when mnt is a corgifs mount whose daemon still
// serves it: listing it would otherwise report "not empty", which hides
// the cause. A dead corgifs mount (ENOTCONN) is left to checkMountpoint,
// which says to unmount it.
func refuseLiveMount(mnt string) error {
	typ, err := fs.MountType(mnt)
	if err != nil || typ != fs.MountTypeName {
		return nil
	}
	// A dead mount can still answer stat from the kernel's attribute
	// cache; listing it is what fails (checkMountpoint then names it dead).
	f, err := os.Open(mnt)
	if errors.Is(err, syscall.ENOTCONN) {
		return nil
	}
	if err == nil {
		_, err = f.Readdirnames(1)
		f.Close()
		if errors.Is(err, syscall.ENOTCONN) {
			return nil
		}
	}
	return fmt.Errorf("%s is already a live corgifs mount: unmount it first ('corgifs unmount %s') or choose another directory", mnt, mnt)
}

// notMountedError explains an unmount of a directory nothing is mounted on.
func notMountedError(mnt string, err error) error {
	if errors.Is(err, fs.ErrNotMounted) {
		return fmt.Errorf("nothing is mounted at %s (not a mount point): it was already unmounted, or never mounted", mnt)
	}
	return err
}
