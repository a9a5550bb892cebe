// Package testenv lets a test say that a component it needs (FUSE, fio,
// Python with torch, a dataset package) is missing from the machine. On a
// developer's machine the test skips and says what to install; under CI=true
// it fails, because .ci/run installs every component and a skip there would
// hide a test that never ran.
package testenv

import (
	"os"
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
