//go:build unix

package cachedir

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The index's sidecar tests (blockcache/cachedir_test.go) check these
// rules through the index; these check the package's own contract.

func TestOpenCreatesAMissingDirectoryWithMode0700(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "cache")
	d, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Fatalf("mode %#o, want 0700", got)
	}
}

func TestOpenRefusesADirectoryOthersCanWriteNamingCacheDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, "")
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Open of a mode 0777 directory: %v, want ErrUnsafe", err)
	}
	for _, want := range []string{"writable by its group and others", "{cache-dir}", "chmod go-w"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// OpenPath names no flag: its caller says which one (ForFlag).
	_, err = OpenPath(dir)
	if !errors.Is(err, ErrUnsafe) || strings.Contains(err.Error(), "--") {
		t.Fatalf("OpenPath: %v, want ErrUnsafe naming no flag", err)
	}
	if err := ForFlag(err, "{disk-cache}", "blocks"); !strings.Contains(err.Error(), "{disk-cache}") || !errors.Is(err, ErrUnsafe) {
		t.Fatalf("ForFlag: %v, want ErrUnsafe naming {disk-cache}", err)
	}
}

func TestResolveRefusesADirectoryInsideTheSource(t *testing.T) {
	root := t.TempDir()
	_, err := Resolve(filepath.Join(root, "sub", "cache"), root)
	if err == nil || !strings.Contains(err.Error(), "inside the source") {
		t.Fatalf("Resolve inside the source: %v", err)
	}
	// A remote source (root "") has no local directory to stay out of.
	if _, err := Resolve(filepath.Join(root, "cache"), ""); err != nil {
		t.Fatal(err)
	}
}

func TestWriteFileReplacesAPlantedLinkAndNeverWritesItsTarget(t *testing.T) {
	tmp := t.TempDir()
	target := filepath.Join(tmp, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(filepath.Join(tmp, "cache"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.Symlink(target, filepath.Join(d.Path(), "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadFile("f", 100); err == nil {
		t.Fatal("ReadFile followed a symbolic link")
	}
	if !d.Exists("f") {
		t.Fatal("Exists does not see the link")
	}
	if err := d.WriteFile("f", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target now holds %q", b)
	}
	b, err := d.ReadFile("f", 100)
	if err != nil || string(b) != "new" {
		t.Fatalf("ReadFile after WriteFile: %q, %v", b, err)
	}
	if err := d.Remove("f"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("f"); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
}
