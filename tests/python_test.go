package tests

import (
	"context"
	"github.com/corgifs/corgifs/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonPackage runs the pytest suite of the corgifs Python package
// (python/tests) against the binary this package built: its readers on
// parts of real mounts, DataLoader workers and a two-rank DDP run that see
// every record once per epoch, and mid-epoch resume. Where pytest or torch
// is missing it skips, except under CI=true, where it fails: .ci/run
// installs them.
func TestPythonPackage(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	fuseOK(t)
	if out, err := exec.Command(python, "-c", "import pytest, torch, numpy").CombinedOutput(); err != nil {
		msg := "%s cannot import pytest, torch and numpy (Debian: apt-get install python3-pytest python3-torch python3-numpy python3-crc32c): %v\n%s"
		testenv.Missing(t, msg, python, err, out)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CORGIFS_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	t.Logf("pytest python/tests (%.0fs):\n%s", time.Since(start).Seconds(), out.String())
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}
