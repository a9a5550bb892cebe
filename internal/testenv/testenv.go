// Package testenv lets a test say that a component it needs (FUSE, fio,
// Python with torch, a dataset package) is missing from the machine. On a
// developer's machine the test skips and says what to install; under CI=true
// it fails, because .ci/run installs every component and a skip there would
// hide a test that never ran.
package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Missing skips t, or fails it under CI=true, with the formatted reason.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing under CI=true (.ci/run must install it): "+format, args...)
	}
	t.Skipf(format, args...)
}

// LockMachine holds, until t and its cleanups end, an exclusive lock shared
// by every test binary on the machine. Tests that change what the machine
// has installed (a Debian package, the mount helper in /sbin, a container
// image tag) take it, so that two copies of the suite run side by side (as
// the stress run of RELIABILITY.md does) wait for each other there instead
// of removing what the other installed. Call it before any other Cleanup:
// cleanups run last-in first-out, so the lock is released after the test
// has removed what it installed.
func LockMachine(t testing.TB) {
	t.Helper()
	dir := "/run/lock"
	if _, err := os.Stat(dir); err != nil {
		dir = os.TempDir()
	}
	f, err := os.OpenFile(filepath.Join(dir, "corgifs-tests.lock"), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("machine lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("machine lock %s: %v", f.Name(), err)
	}
	t.Cleanup(func() { f.Close() })
}
