package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/internal/testenv"
)

// TestMountByAnotherUserWithoutFUSEAccessNamesTheCauseAndTheFix mounts as
// uid 65534 while /dev/fuse is root-only (mode 0600, as in many
// containers; the test sets it so for its run when it is not): the mount
// fails with an error that says /dev/fuse cannot be opened and how to fix
// it, not only fusermount's exit status.
func TestMountByAnotherUserWithoutFUSEAccessNamesTheCauseAndTheFix(t *testing.T) {
	fuseOK(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, to run the mount as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.Missing(t, "setpriv (util-linux)")
	}
	fi, err := os.Stat("/dev/fuse")
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode&0o066 != 0 {
		// Root's own mounts ignore the mode, so the other tests are
		// unaffected while it is narrowed.
		if err := os.Chmod("/dev/fuse", 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod("/dev/fuse", mode) })
	}
	src := genSynthetic(t, 200, 4, 2, 1, "shuffled")
	base := t.TempDir()
	mnt, cache := filepath.Join(base, "mnt"), filepath.Join(base, "cache")
	for _, d := range []string{mnt, cache} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	// Every user must reach the source and the mount point.
	for d := filepath.Dir(src); d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chmod(base, 0o755)
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "mount", src, mnt, "--cache-dir", cache)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil {
		exec.Command("umount", "-l", mnt).Run()
		t.Fatalf("the mount by uid 65534 succeeded with /dev/fuse root-only:\n%s", out.String())
	}
	for _, want := range []string{"/dev/fuse cannot be opened for reading and writing by uid 65534", "make it mode 0666", "or run as root"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("the failed mount's error lacks %q:\n%s", want, out.String())
		}
	}
}
