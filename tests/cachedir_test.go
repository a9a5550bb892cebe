package tests

// The index cache directory (issue 12, items 1 and 14): what another user
// could plant there is never served, and corgifs never uses a directory
// that another user could have written.

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/index"
)

// The sidecar's two gob values, as blockcache writes them: gob matches
// fields by name.
type sidecarHeader struct {
	Magic          string
	Version        int
	Root           string
	BlockSize      int64
	Include        []string
	SkipCorrupt    bool
	FollowSymlinks bool
}

type sidecarBody struct {
	Sum   [32]byte
	Index []byte
}

// plantSidecar rewrites the only sidecar in cache with its index changed by
// spoil and a matching checksum, as someone able to write there could.
func plantSidecar(t *testing.T, cache string, spoil func(ix *index.Index)) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(cache, "*.index"))
	if len(paths) != 1 {
		t.Fatalf("sidecars %v, want one", paths)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	dec := gob.NewDecoder(bytes.NewReader(b))
	var h sidecarHeader
	var body sidecarBody
	var ix index.Index
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&body); err != nil {
		t.Fatal(err)
	}
	if err := gob.NewDecoder(bytes.NewReader(body.Index)).Decode(&ix); err != nil {
		t.Fatal(err)
	}
	spoil(&ix)
	var enc, out bytes.Buffer
	if err := gob.NewEncoder(&enc).Encode(&ix); err != nil {
		t.Fatal(err)
	}
	e := gob.NewEncoder(&out)
	if err := e.Encode(h); err != nil {
		t.Fatal(err)
	}
	if err := e.Encode(sidecarBody{Sum: sha256.Sum256(enc.Bytes()), Index: enc.Bytes()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths[0], out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPlantedSidecarWithReorderedBlocksIsNeverServed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(ix *index.Index)
	}{
		{"block 1 replaced by block 0", func(ix *index.Index) { ix.Blocks[1] = ix.Blocks[0] }},
		{"blocks 0 and 1 swapped", func(ix *index.Index) { ix.Blocks[0], ix.Blocks[1] = ix.Blocks[1], ix.Blocks[0] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := genSynthetic(t, 3000, 8, 2, 2, "clustered")
			cache := t.TempDir()
			flags := []string{"--block-size", "16KiB", "--cache-dir", cache}
			corgifs(t, append([]string{"index", src}, flags...)...)
			plantSidecar(t, cache, tc.spoil)
			m := startMount(t, src, append(flags, "--seed", "1", "--parts", "2")...)
			if log, ok := m.logHas("rebuilding index", "does not match how its blocks must cut the files"); !ok {
				t.Errorf("the mount does not log why it rebuilt the index:\n%s", log)
			}
			var served [][]byte
			for i := range 2 {
				served = append(served, frames(t, m.read(0, i, 2))...)
			}
			if want, got := sortedHashes(sourceRecords(t, src)), sortedHashes(hashes(served)); !slices.Equal(want, got) {
				seen := map[[32]byte]int{}
				dup := 0
				for _, h := range got {
					if seen[h]++; seen[h] == 2 {
						dup++
					}
				}
				t.Fatalf("epoch 0 serves %d records (%d of them twice), the source holds %d: not exactly once", len(got), dup, len(want))
			}
		})
	}
}

// stripped runs the binary with only PATH and TMPDIR set: no HOME, no
// XDG_CACHE_HOME, as in a systemd service or a container.
func stripped(t *testing.T, binary, tmp string, cred *syscall.Credential, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + tmp, "GORACE=atexit_sleep_ms=0"}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestDefaultCacheDirWithoutHomeIsNeverShared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the binary as root and as another user")
	}
	src := genSynthetic(t, 100, 8, 2, 1, "clustered")
	tmp := t.TempDir()

	// Root: /var/cache/corgifs, nothing in TMPDIR.
	const varCache = "/var/cache/corgifs"
	_, statErr := os.Stat(varCache)
	before, _ := filepath.Glob(filepath.Join(varCache, "*"))
	t.Cleanup(func() {
		after, _ := filepath.Glob(filepath.Join(varCache, "*"))
		for _, p := range after {
			if !slices.Contains(before, p) {
				os.Remove(p)
			}
		}
		if statErr != nil {
			os.Remove(varCache)
		}
	})
	if out, code := stripped(t, bin, tmp, nil, "index", src); code != 0 {
		t.Fatalf("index as root without HOME: exit %d\n%s", code, out)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("index as root without HOME wrote into TMPDIR: %v", left)
	}
	if after, _ := filepath.Glob(filepath.Join(varCache, "*.index")); len(after) == 0 {
		t.Fatalf("no sidecar in %s", varCache)
	}
	if fi, err := os.Stat(varCache); err != nil || fi.Mode().Perm()&0o022 != 0 {
		t.Fatalf("%s: %v %v, want it writable by root only", varCache, fi.Mode(), err)
	}
	if out, _ := stripped(t, bin, tmp, nil, "index", "--help"); !strings.Contains(out, `(default "`+varCache+`")`) {
		t.Errorf("index --help as root without HOME does not show the default %s:\n%s", varCache, out)
	}

	// Another user: refused, saying what to do. The binary is copied where
	// that user may run it.
	dir, err := os.MkdirTemp("", "corgifs-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	tmp = filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o777)
	nobodyBin := filepath.Join(dir, "corgifs")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nobodyBin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := stripped(t, nobodyBin, tmp, &syscall.Credential{Uid: 65534, Gid: 65534}, "index", src)
	if code != 1 || !strings.Contains(out, "--cache-dir") || !strings.Contains(out, "XDG_CACHE_HOME") {
		t.Fatalf("index as uid 65534 without HOME: exit %d, want a refusal saying to pass --cache-dir or set XDG_CACHE_HOME:\n%s", code, out)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("index as another user without HOME wrote into TMPDIR: %v", left)
	}
}

func TestUnsafeCacheDirIsRefusedNamingIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	src := genSynthetic(t, 100, 8, 2, 1, "clustered")
	for _, tc := range []struct {
		name string
		make func(dir string) error
		want string
	}{
		{"owned by another user", func(d string) error { return os.Chown(d, 65534, 65534) }, "is owned by uid 65534"},
		{"world-writable", func(d string) error { return os.Chmod(d, 0o1777) }, "is writable by its group and others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			if err := os.Mkdir(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.make(cache); err != nil {
				t.Fatal(err)
			}
			_, stderr, code, _ := runTimed(t, 30*time.Second, "index", src, "--cache-dir", cache)
			if code != 1 || !strings.Contains(stderr, "cache directory "+cache+" "+tc.want) || !strings.Contains(stderr, "--cache-dir") {
				t.Fatalf("exit %d, want a refusal naming %s and saying %q:\n%s", code, cache, tc.want, stderr)
			}
			if left, _ := os.ReadDir(cache); len(left) != 0 {
				t.Fatalf("wrote into the refused directory: %v", left)
			}
		})
	}
}

func TestCacheDirReachingIntoSourceThroughASymlinkIsRefused(t *testing.T) {
	src := genSynthetic(t, 100, 8, 2, 1, "clustered")
	outside := t.TempDir()
	if err := os.Symlink(src, filepath.Join(outside, "link")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(src, "sub"), 0o755)
	if err := os.Symlink(filepath.Join(src, "sub"), filepath.Join(outside, "sub")); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		var out []string
		filepath.WalkDir(src, func(p string, _ os.DirEntry, _ error) error { out = append(out, p); return nil })
		return out
	}
	before := list()
	for _, cache := range []string{
		filepath.Join(outside, "link", "cache"),
		filepath.Join(outside, "sub") + "/../cache", // the kernel's "..": src/cache
	} {
		_, stderr, code, _ := runTimed(t, 30*time.Second, "index", src, "--cache-dir", cache)
		if code != 1 || !strings.Contains(stderr, "inside the source") {
			t.Errorf("--cache-dir %s: exit %d, want refused as inside the source:\n%s", cache, code, stderr)
		}
	}
	if after := list(); !slices.Equal(before, after) {
		t.Fatalf("the source changed:\n%q\n%q", before, after)
	}
}
