package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/internal/testenv"
)

// TestDebianPackagePassesLintianInstallsAndMountsFromFstab builds the
// release's Debian package for this machine (release/, the builder of
// make release), checks it with lintian, installs it with dpkg -i, mounts
// a dataset through an fstab line with mount -a (the packaged
// /usr/sbin/mount.fuse.corgifs helper and /usr/bin/corgifs), reads an
// epoch, verifies the packaged systemd examples, unmounts, and removes
// the package.
func TestDebianPackagePassesLintianInstallsAndMountsFromFstab(t *testing.T) {
	fuseOK(t)
	if os.Geteuid() != 0 {
		t.Skip("dpkg -i and mount -a need root")
	}
	for _, tool := range []string{"dpkg", "lintian", "mount", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "no %s (apt-get install %s)", tool, map[string]string{"mount": "mount", "dpkg": "dpkg", "lintian": "lintian", "git": "git"}[tool])
		}
	}
	testenv.LockMachine(t) // another copy of the suite may be installing it
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "corgifs").CombinedOutput(); err == nil && strings.Contains(string(out), "installed") {
		t.Fatalf("a corgifs package is installed (%s): this test would replace and remove it", out)
	}
	const helper = "/usr/sbin/mount.fuse.corgifs"
	if _, err := os.Lstat(helper); err == nil {
		t.Fatalf("%s exists: this test would replace an installed helper", helper)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// The release builder, for this machine's architecture only.
	dist := t.TempDir()
	build := exec.CommandContext(ctx, "go", "run", ".", "-out", dist, "-arch", runtime.GOARCH, "-image=false")
	build.Dir = "../release"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("release builder: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "corgifs_*_"+runtime.GOARCH+".deb"))
	if len(debs) != 1 {
		entries, _ := os.ReadDir(dist)
		t.Fatalf("release builder wrote %v, want one .deb for %s", entries, runtime.GOARCH)
	}
	deb := debs[0]

	// lintian as Debian's archive runs it; the overrides the package
	// ships are its only exceptions.
	if out, err := exec.CommandContext(ctx, "lintian", "--fail-on", "error,warning", "--no-tag-display-limit", deb).CombinedOutput(); err != nil {
		t.Errorf("lintian %s: %v\n%s", filepath.Base(deb), err, out)
	}

	if out, err := exec.CommandContext(ctx, "dpkg", "-i", deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "corgifs").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge corgifs: %v\n%s", err, out)
		}
		if _, err := os.Lstat("/usr/bin/corgifs"); err == nil {
			t.Errorf("/usr/bin/corgifs is still there after dpkg --purge")
		}
	})
	if target, err := filepath.EvalSymlinks(helper); err != nil || target != "/usr/bin/corgifs" {
		t.Errorf("%s resolves to %q (%v), want /usr/bin/corgifs", helper, target, err)
	}
	if out, err := exec.Command("/usr/bin/corgifs", "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "(revision ") {
		t.Errorf("corgifs --version: %v: %s, want the release and the commit", err, out)
	}
	if out, err := exec.Command("man", "-w", "corgifs").CombinedOutput(); err == nil && !strings.Contains(string(out), "/usr/share/man/man1/corgifs.1.gz") {
		t.Errorf("man -w corgifs: %s", out)
	}

	// The packaged examples name /usr/bin/corgifs, which now exists.
	if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
		units, _ := filepath.Glob("/usr/share/doc/corgifs/examples/systemd/*")
		if len(units) < 3 {
			t.Errorf("packaged systemd examples: %v", units)
		}
		dir := t.TempDir()
		for _, u := range units {
			b, _ := os.ReadFile(u)
			p := filepath.Join(dir, filepath.Base(u))
			os.WriteFile(p, b, 0o644)
			if out, err := exec.CommandContext(ctx, analyze, "verify", p).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
			}
		}
	}

	// An fstab line, mounted by mount -a from a fstab of its own (-T).
	src := genSynthetic(t, 3000, 4, 2, 3, "clustered")
	base := t.TempDir()
	mnt, logPath := filepath.Join(base, "mnt"), filepath.Join(base, "corgifs.log")
	os.Mkdir(mnt, 0o755)
	fstab := filepath.Join(base, "fstab")
	line := fmt.Sprintf("%s %s fuse.corgifs defaults,nofail,seed=7,parts=2,buffer=10%%,max_memory=256MiB,cache_dir=%s,log_file=%s 0 0\n",
		src, mnt, filepath.Join(base, "cache"), logPath)
	if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "mount", "-a", "-T", fstab).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("mount -a -T %s: %v\n%s\nline: %sdaemon log:\n%s", fstab, err, out, line, log)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	records := 0
	for i := range 2 {
		b, err := os.ReadFile(filepath.Join(mnt, "epoch-0000", fmt.Sprintf("part-%05d-of-00002.tfrecord", i)))
		if err != nil {
			t.Fatalf("right after mount -a returned: %v", err)
		}
		records += len(frames(t, b))
	}
	if records != 3000 {
		t.Errorf("epoch 0 through the fstab mount holds %d records, want 3000", records)
	}
	if out, err := exec.CommandContext(ctx, "umount", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for mounted(mnt) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if mounted(mnt) {
		t.Errorf("%s still mounted after umount", mnt)
	}
}
