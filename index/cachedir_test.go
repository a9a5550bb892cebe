package index

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/internal/testenv"
)

// resealSidecar rewrites the sidecar at path with its index changed by
// spoil and a checksum that matches: what someone able to write the cache
// directory could plant.
func resealSidecar(t *testing.T, path string, spoil func(ix *Index)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := gob.NewDecoder(bytes.NewReader(b))
	var h sidecarHeader
	var body sidecarBody
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&body); err != nil {
		t.Fatal(err)
	}
	var ix Index
	if err := gob.NewDecoder(bytes.NewReader(body.Index)).Decode(&ix); err != nil {
		t.Fatal(err)
	}
	spoil(&ix)
	var enc bytes.Buffer
	if err := gob.NewEncoder(&enc).Encode(&ix); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	e := gob.NewEncoder(&out)
	if err := e.Encode(h); err != nil {
		t.Fatal(err)
	}
	if err := e.Encode(sidecarBody{Sum: sha256.Sum256(enc.Bytes()), Index: enc.Bytes()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPlantedSidecarWhoseBlocksDoNotTileTheFilesIsRebuilt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(ix *Index)
	}{
		{"block 1 replaced by block 0", func(ix *Index) { ix.Blocks[1] = ix.Blocks[0] }},
		{"blocks 0 and 1 swapped", func(ix *Index) { ix.Blocks[0], ix.Blocks[1] = ix.Blocks[1], ix.Blocks[0] }},
		{"a block dropped", func(ix *Index) {
			b := ix.Blocks[1]
			ix.Blocks = slices.Delete(ix.Blocks, 1, 2)
			ix.Frames = slices.Delete(ix.Frames, int(b.Records), int(b.Records)*2)
			ix.Records -= int64(b.Records)
			ix.Bytes -= b.Len
			ix.Files[b.File].Records -= int64(b.Records)
		}},
		{"frame lengths moved between blocks", func(ix *Index) {
			n := ix.Blocks[0].Records
			ix.Frames[0], ix.Frames[n] = ix.Frames[n], ix.Frames[0]
		}},
		{"a block longer than its records", func(ix *Index) { ix.Blocks[0].Len++ }},
		{"the last block short of the end", func(ix *Index) {
			last := &ix.Blocks[len(ix.Blocks)-1]
			last.Records--
			last.Len -= int64(ix.Frames[len(ix.Frames)-1])
			ix.Frames = ix.Frames[:len(ix.Frames)-1]
			ix.Files[last.File].Records--
			ix.Records--
			ix.Bytes = 0
			for _, b := range ix.Blocks {
				ix.Bytes += b.Len
			}
		}},
		{"a file's record count", func(ix *Index) { ix.Files[0].Records++ }},
		{"damage invented over a block", func(ix *Index) {
			ix.Damaged = append(ix.Damaged, Damage{File: ix.Files[0].Path, From: 0, To: ix.Blocks[0].Len})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := blocktest.Dataset(t, 21, 2, 60, 400)
			cache := t.TempDir()
			o := Options{BlockSize: 2048, CacheDir: cache}
			want, _, _ := openLogged(t, root, o)
			if len(want.Blocks) < 4 {
				t.Fatalf("%d blocks; the test needs several", len(want.Blocks))
			}
			resealSidecar(t, sidecars(t, cache)[0], tc.spoil)
			ix, fromCache, log := openLogged(t, root, o)
			if fromCache {
				t.Fatalf("the planted sidecar was used; log:\n%s", log)
			}
			if !strings.Contains(log, "rebuilding index") || !strings.Contains(log, "does not match how its blocks must cut the files") {
				t.Fatalf("log does not say why it rebuilds:\n%s", log)
			}
			if ix.Records != want.Records || !slices.Equal(ix.Blocks, want.Blocks) {
				t.Fatal("the rebuilt index differs from the built one")
			}
			if _, fromCache, _ := openLogged(t, root, o); !fromCache {
				t.Fatal("the planted sidecar was not replaced")
			}
		})
	}
}

func TestSidecarWithDamagedRangesTilesAndComesFromCache(t *testing.T) {
	root, files := blocktest.Dataset(t, 22, 2, 60, 400)
	d := slices.Clone(files[1].Data)
	d[files[1].Starts[10]+3] ^= 0x40  // a length byte: resync by scanning
	d[files[1].Starts[30]+20] ^= 0x40 // a data byte: just that frame
	blocktest.WriteBytes(t, files[1].Path, d)
	cache := t.TempDir()
	o := Options{BlockSize: 2048, CacheDir: cache, SkipCorrupt: true}
	built, _, _ := openLogged(t, root, o)
	if len(built.Damaged) != 2 {
		t.Fatalf("damaged %+v, want two ranges", built.Damaged)
	}
	if err := built.checkTiling(); err != nil {
		t.Fatalf("a built index does not tile its files: %v", err)
	}
	if _, fromCache, log := openLogged(t, root, o); !fromCache {
		t.Fatalf("the sidecar of an index with damaged ranges was rebuilt:\n%s", log)
	}
}

func TestMarkStaleDoesNotFollowASymlink(t *testing.T) {
	root, _ := blocktest.Dataset(t, 24, 1, 20, 200)
	cache := t.TempDir()
	o := Options{BlockSize: 1024, CacheDir: cache}
	openLogged(t, root, o)
	victim := filepath.Join(t.TempDir(), "victim")
	blocktest.WriteBytes(t, victim, []byte("precious"))
	stale := sidecars(t, cache)[0] + staleSuffix
	if err := os.Symlink(victim, stale); err != nil {
		t.Fatal(err)
	}
	if err := MarkStale(blocktest.Dir(t, root, false), o, "block 3 failed its CRC"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Fatalf("victim now holds %q (%v), want it unchanged", b, err)
	}
	if fi, err := os.Lstat(stale); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stale mark %v (%v), want a regular file of mode 0600", fi.Mode(), err)
	}
	if _, fromCache, log := openLogged(t, root, o); fromCache || !strings.Contains(log, "block 3 failed its CRC") {
		t.Fatalf("Open after MarkStale: from cache %v, log:\n%s", fromCache, log)
	}
}

func TestCacheFilesAreNewFilesNeverWrittenThroughALink(t *testing.T) {
	root, _ := blocktest.Dataset(t, 25, 1, 20, 200)
	cache := t.TempDir()
	o := Options{BlockSize: 1024, CacheDir: cache}
	openLogged(t, root, o)
	sc := sidecars(t, cache)[0]
	victim := filepath.Join(t.TempDir(), "victim")
	blocktest.WriteBytes(t, victim, []byte("precious"))
	// A sidecar that is a link is not read, and the rebuild replaces the
	// link instead of writing through it.
	os.Remove(sc)
	if err := os.Symlink(victim, sc); err != nil {
		t.Fatal(err)
	}
	_, fromCache, log := openLogged(t, root, o)
	if fromCache || !strings.Contains(log, "symbolic link") {
		t.Fatalf("from cache %v; log does not say the sidecar is a link:\n%s", fromCache, log)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("victim now holds %q", b)
	}
	if fi, err := os.Lstat(sc); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sidecar %v (%v), want a regular file of mode 0600", fi.Mode(), err)
	}
}

func TestCacheDirOwnedByAnotherUserOrWritableByOthersIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T, dir string)
		want string
	}{
		{"owned by another user", func(t *testing.T, dir string) {
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "is owned by uid 65534, not by uid 0"},
		{"writable by others", func(t *testing.T, dir string) { os.Chmod(dir, 0o777) }, "is writable by its group and others (mode 0777)"},
		{"world-writable with the sticky bit, as /tmp", func(t *testing.T, dir string) { os.Chmod(dir, 0o1777) }, "is writable by its group and others (mode 0777)"},
		{"writable by its group", func(t *testing.T, dir string) { os.Chmod(dir, 0o770) }, "is writable by its group (mode 0770)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := blocktest.Dataset(t, 26, 1, 10, 100)
			cache := filepath.Join(t.TempDir(), "cache")
			if err := os.Mkdir(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.make(t, cache)
			_, _, err := Open(t.Context(), blocktest.Dir(t, root, false), Options{CacheDir: cache})
			if !errors.Is(err, ErrUnsafeCacheDir) || !strings.Contains(err.Error(), cache+" "+tc.want) || !strings.Contains(err.Error(), "{cache-dir}") {
				t.Fatalf("Open: %v; want a refusal naming %s and saying %q and what to do", err, cache, tc.want)
			}
			if len(sidecars(t, cache)) != 0 {
				t.Fatal("a sidecar was written into the refused directory")
			}
			if err := MarkStale(blocktest.Dir(t, root, false), Options{CacheDir: cache}, "x"); !errors.Is(err, ErrUnsafeCacheDir) {
				t.Fatalf("MarkStale: %v, want a refusal", err)
			}
		})
	}
}

func TestSidecarOwnedByAnotherUserOrWritableByOthersIsRebuilt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"owned by another user", func(p string) error { return os.Chown(p, 65534, 65534) }, "is owned by uid 65534"},
		{"writable by others", func(p string) error { return os.Chmod(p, 0o666) }, "is writable by its group and others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := blocktest.Dataset(t, 27, 1, 10, 100)
			cache := t.TempDir()
			o := Options{CacheDir: cache}
			openLogged(t, root, o)
			sc := sidecars(t, cache)[0]
			if err := tc.make(sc); err != nil {
				t.Fatal(err)
			}
			_, fromCache, log := openLogged(t, root, o)
			if fromCache || !strings.Contains(log, tc.want) || !strings.Contains(log, filepath.Base(sc)) {
				t.Fatalf("from cache %v; log does not say which sidecar is untrusted and why (%q):\n%s", fromCache, tc.want, log)
			}
			if _, fromCache, _ := openLogged(t, root, o); !fromCache {
				t.Fatal("the untrusted sidecar was not replaced")
			}
		})
	}
}

func TestNewCacheDirIsCreatedWithMode0700(t *testing.T) {
	root, _ := blocktest.Dataset(t, 28, 1, 10, 100)
	cache := filepath.Join(t.TempDir(), "a", "cache")
	openLogged(t, root, Options{CacheDir: cache})
	fi, err := os.Stat(cache)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir %v (%v), want mode 0700", fi.Mode(), err)
	}
}

func TestCacheDirReachingIntoSourceThroughASymlinkIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache func(t *testing.T, root, outside string) string
	}{
		{"a link to the source", func(t *testing.T, root, outside string) string {
			os.Symlink(root, filepath.Join(outside, "l"))
			return filepath.Join(outside, "l", "cache")
		}},
		{"a link to a directory inside it", func(t *testing.T, root, outside string) string {
			os.Mkdir(filepath.Join(root, "sub"), 0o755)
			os.Symlink(filepath.Join(root, "sub"), filepath.Join(outside, "l"))
			return filepath.Join(outside, "l")
		}},
		{"link/.. going to the parent of the link's target", func(t *testing.T, root, outside string) string {
			os.Mkdir(filepath.Join(root, "sub"), 0o755)
			os.Symlink(filepath.Join(root, "sub"), filepath.Join(outside, "l"))
			// Lexically outside/cache; the kernel makes it root/cache.
			return filepath.Join(outside, "l") + "/../cache"
		}},
		{"a relative link", func(t *testing.T, root, outside string) string {
			rel, _ := filepath.Rel(outside, root)
			os.Symlink(rel, filepath.Join(outside, "l"))
			return filepath.Join(outside, "l", "x", "y")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := blocktest.Dataset(t, 29, 1, 5, 100)
			outside := t.TempDir()
			cache := tc.cache(t, root, outside)
			before := tree(t, root)
			_, _, err := Open(t.Context(), blocktest.Dir(t, root, false), Options{CacheDir: cache})
			if err == nil || !strings.Contains(err.Error(), "inside the source") {
				t.Fatalf("Open with CacheDir %s: %v, want a refusal", cache, err)
			}
			if err := MarkStale(blocktest.Dir(t, root, false), Options{CacheDir: cache}, "x"); err == nil || !strings.Contains(err.Error(), "inside the source") {
				t.Fatalf("MarkStale with CacheDir %s: %v, want a refusal", cache, err)
			}
			if after := tree(t, root); !slices.Equal(before, after) {
				t.Fatalf("source changed:\n%q\n%q", before, after)
			}
		})
	}
}

func TestDefaultCacheDirIsNeverShared(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	d, err := DefaultCacheDir()
	if os.Geteuid() == 0 {
		if err != nil || d != "/var/cache/corgifs" {
			t.Fatalf("root without HOME: %q, %v; want /var/cache/corgifs", d, err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "{cache-dir}") || !strings.Contains(err.Error(), "XDG_CACHE_HOME") {
		t.Fatalf("without HOME: %q, %v; want an error saying to pass {cache-dir} or set XDG_CACHE_HOME", d, err)
	}
	t.Setenv("XDG_CACHE_HOME", "relative/cache") // ignored, as the XDG spec says
	t.Setenv("HOME", "/home/u")
	if d, err := DefaultCacheDir(); err != nil || d != "/home/u/.cache/corgifs" {
		t.Fatalf("with HOME: %q, %v", d, err)
	}
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	if d, err := DefaultCacheDir(); err != nil || d != "/x/cache/corgifs" {
		t.Fatalf("with XDG_CACHE_HOME: %q, %v", d, err)
	}
}

func TestCacheDirInSourceThroughABindMountIsRefused(t *testing.T) {
	root, _ := blocktest.Dataset(t, 30, 1, 5, 100)
	bind := filepath.Join(t.TempDir(), "bind")
	if err := os.Mkdir(bind, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(root, bind, "", syscall.MS_BIND, ""); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("a bind mount needs root: %v", err)
		}
		// As root (CI), a bind mount that fails is a missing component.
		testenv.Missing(t, "cannot bind mount as root: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(bind, 0) })
	before := tree(t, root)
	_, _, err := Open(t.Context(), blocktest.Dir(t, root, false), Options{CacheDir: filepath.Join(bind, "cache")})
	if err == nil || !strings.Contains(err.Error(), "inside the source") {
		t.Fatalf("Open with the cache dir in a bind mount of the source: %v, want a refusal", err)
	}
	if after := tree(t, root); !slices.Equal(before, after) {
		t.Fatalf("source changed:\n%q\n%q", before, after)
	}
}
