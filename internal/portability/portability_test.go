package portability

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/internal/testenv"
)

// purePackages are the packages that must build wherever Go runs.
// blockcache is among them because the shuffler imports it.
var purePackages = []string{
	"github.com/corgifs/corgifs/formats/...",
	"github.com/corgifs/corgifs/tfexample/...",
	// The validator, not validator/validate: that runs corgifs mounts,
	// which are Linux's.
	"github.com/corgifs/corgifs/validator",
	"github.com/corgifs/corgifs/datagen/...",
	"github.com/corgifs/corgifs/shuffler/...",
	"github.com/corgifs/corgifs/blockcache/...",
	// The Source seam; not source/s3, whose S3 client and TLS stack would
	// triple the time of this test without a system call of ours in them.
	"github.com/corgifs/corgifs/source",
}

// TestPurePackagesBuildOnOtherSystems type-checks the pure packages, and
// what they import, as the go command selects their files for macOS and
// Windows (see typeCheckFor), so that a Linux-only system call used outside
// a _linux.go file is caught on Linux.
func TestPurePackagesBuildOnOtherSystems(t *testing.T) {
	goBin := goTool(t)
	for _, target := range []struct{ goos, goarch string }{
		{"darwin", "arm64"},
		{"windows", "amd64"},
	} {
		t.Run(target.goos+"_"+target.goarch, func(t *testing.T) {
			if err := typeCheckFor(t, goBin, "", target.goos, target.goarch, purePackages); err != nil {
				t.Fatalf("GOOS=%s GOARCH=%s CGO_ENABLED=0, type-checking %s: %v\nmove the Linux-only calls into a _linux.go file with a //go:build !linux fallback beside it",
					target.goos, target.goarch, strings.Join(purePackages, " "), err)
			}
		})
	}
}

// goTool returns the go command of the toolchain in use: the one in
// `go env GOROOT`, not whichever go is first on PATH.
func goTool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "the go command is not on PATH (install Go): %v", err)
	}
	out, err := exec.CommandContext(t.Context(), path, "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("%s env GOROOT: %v", path, err)
	}
	goBin := filepath.Join(strings.TrimSpace(string(out)), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		t.Fatalf("go env GOROOT names a toolchain without a go command: %v", err)
	}
	return goBin
}
