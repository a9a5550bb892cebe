package index

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/internal/blocktest"
)

// openLogged runs Open with a logger writing to a buffer and returns the log.
func openLogged(t *testing.T, root string, o Options) (*Index, bool, string) {
	t.Helper()
	var log bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&log, nil))
	ix, fromCache, err := Open(t.Context(), blocktest.Dir(t, root, o.FollowSymlinks), o)
	if err != nil {
		t.Fatalf("Open: %v\nlog:\n%s", err, log.String())
	}
	return ix, fromCache, log.String()
}

// sidecars lists the sidecar files in dir.
func sidecars(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.index"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tree lists every entry under root with its type, size and mtime.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpenSecondTimeComesFromCacheAndEqualsTheBuiltIndex(t *testing.T) {
	root, _ := blocktest.Dataset(t, 1, 3, 50, 1000)
	cache := t.TempDir()
	o := Options{BlockSize: 4096, CacheDir: cache}
	ix1, fromCache, _ := openLogged(t, root, o)
	if fromCache {
		t.Fatal("first Open came from a cache")
	}
	if n := len(sidecars(t, cache)); n != 1 {
		t.Fatalf("%d sidecars after the first Open, want 1", n)
	}
	for range 2 {
		ix2, fromCache, log := openLogged(t, root, o)
		if !fromCache {
			t.Fatalf("second Open rebuilt the index; log:\n%s", log)
		}
		if strings.Contains(log, "rebuilding") {
			t.Fatalf("Open from cache logged a rebuild:\n%s", log)
		}
		if !reflect.DeepEqual(ix1, ix2) {
			t.Fatalf("cached index differs:\n%+v\n%+v", ix1, ix2)
		}
	}
}

func TestOpenWithoutCacheDirAlwaysBuilds(t *testing.T) {
	root, _ := blocktest.Dataset(t, 1, 1, 5, 100)
	for range 2 {
		if _, fromCache, _ := openLogged(t, root, Options{}); fromCache {
			t.Fatal("Open without a CacheDir came from a cache")
		}
	}
}

func TestOpenRebuildsWhenTheSourceChanges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, root string, files []*blocktest.SrcFile)
		rebuild bool
		reason  []string // in the log line
	}{
		{"mtime changed", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			fi, _ := os.Stat(files[1].Path)
			blocktest.SetMtime(t, files[1].Path, fi.ModTime().Add(time.Second).UnixNano())
		}, true, []string{"f1.tfrecord", "modification time"}},
		{"rewritten in place, same size", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			ps := slices.Clone(files[2].Payloads)
			ps[0] = bytes.Repeat([]byte{0xee}, len(ps[0])) // same length, other bytes
			blocktest.WriteRecords(t, root, files[2].Rel, ps)
			fi, _ := os.Stat(files[2].Path)
			blocktest.SetMtime(t, files[2].Path, fi.ModTime().Add(time.Second).UnixNano()) // a coarse clock must not hide it
		}, true, []string{"f2.tfrecord", "modification time"}},
		{"record appended, mtime restored", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			fi, _ := os.Stat(files[0].Path)
			d, _ := blocktest.Frames(t, [][]byte{{1, 2, 3}})
			blocktest.WriteBytes(t, files[0].Path, append(slices.Clone(files[0].Data), d...))
			blocktest.SetMtime(t, files[0].Path, fi.ModTime().UnixNano())
		}, true, []string{"f0.tfrecord", "changed size", "->"}},
		{"new file", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			blocktest.WriteRecords(t, root, "f9.tfrecord", [][]byte{{1}})
		}, true, []string{"new source file f9.tfrecord"}},
		{"new file in a new subdirectory", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			blocktest.WriteRecords(t, root, "sub/g.tfrecords", [][]byte{{1}})
		}, true, []string{"new source file sub/g.tfrecords"}},
		{"file removed", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			if err := os.Remove(files[0].Path); err != nil {
				t.Fatal(err)
			}
		}, true, []string{"f0.tfrecord", "removed"}},
		{"non-matching file added", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			blocktest.WriteBytes(t, filepath.Join(root, "README.txt"), []byte("hello"))
		}, false, nil},
		{"symlink added", func(t *testing.T, root string, files []*blocktest.SrcFile) {
			if err := os.Symlink(files[0].Path, filepath.Join(root, "link.tfrecord")); err != nil {
				t.Fatal(err)
			}
		}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, files := blocktest.Dataset(t, 2, 3, 30, 500)
			cache := t.TempDir()
			o := Options{BlockSize: 2048, CacheDir: cache}
			openLogged(t, root, o)
			tc.change(t, root, files)
			ix, fromCache, log := openLogged(t, root, o)
			if fromCache == tc.rebuild {
				t.Fatalf("fromCache = %v after the change, want %v; log:\n%s", fromCache, !tc.rebuild, log)
			}
			if tc.rebuild {
				for _, w := range append(tc.reason, "rebuilding index") {
					if !strings.Contains(log, w) {
						t.Fatalf("log does not mention %q:\n%s", w, log)
					}
				}
			}
			if fresh := build(t, root, o); !reflect.DeepEqual(ix, fresh) {
				t.Fatalf("index after the change differs from a fresh build:\n%+v\n%+v", ix, fresh)
			}
			// The rebuilt index was saved.
			if _, fromCache, log := openLogged(t, root, o); !fromCache {
				t.Fatalf("Open after the rebuild did not use the new sidecar; log:\n%s", log)
			}
		})
	}
}

func TestOpenIgnoresBadSidecar(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spoil  func(t *testing.T, path string, good []byte) []byte
		reason string
	}{
		{"garbage", func(t *testing.T, _ string, good []byte) []byte {
			g := make([]byte, len(good))
			r := rand.New(rand.NewPCG(1, 2))
			for i := range g {
				g[i] = byte(r.Uint32())
			}
			return g
		}, "is not a corgifs index"},
		{"empty", func(*testing.T, string, []byte) []byte { return nil }, "is not a corgifs index"},
		{"text", func(*testing.T, string, []byte) []byte { return []byte("hello, world\n") }, "is not a corgifs index"},
		{"truncated index", func(_ *testing.T, _ string, good []byte) []byte { return good[:len(good)-10] }, "is corrupt"},
		{"old version", func(t *testing.T, _ string, good []byte) []byte {
			return encodeSidecar(t, sidecarHeader{Magic: sidecarMagic, Version: sidecarVersion - 1}, nil)
		}, "version"},
		{"other parameters at the same path", func(t *testing.T, _ string, good []byte) []byte {
			var h sidecarHeader
			if err := gob.NewDecoder(bytes.NewReader(good)).Decode(&h); err != nil {
				t.Fatal(err)
			}
			h.BlockSize++
			return encodeSidecar(t, h, &Index{})
		}, "other parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := blocktest.Dataset(t, 3, 2, 20, 500)
			cache := t.TempDir()
			o := Options{BlockSize: 1024, CacheDir: cache}
			want, _, _ := openLogged(t, root, o)
			sc := sidecars(t, cache)
			if len(sc) != 1 {
				t.Fatalf("sidecars %v, want one", sc)
			}
			good, err := os.ReadFile(sc[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(sc[0], tc.spoil(t, sc[0], good), 0o644); err != nil {
				t.Fatal(err)
			}
			ix, fromCache, log := openLogged(t, root, o)
			if fromCache {
				t.Fatal("a spoiled sidecar was used")
			}
			for _, w := range []string{"rebuilding index", tc.reason} {
				if !strings.Contains(log, w) {
					t.Fatalf("log does not mention %q:\n%s", w, log)
				}
			}
			if !reflect.DeepEqual(ix, want) {
				t.Fatalf("rebuilt index differs:\n%+v\n%+v", ix, want)
			}
			if _, fromCache, _ := openLogged(t, root, o); !fromCache {
				t.Fatal("the spoiled sidecar was not replaced")
			}
		})
	}
}

func encodeSidecar(t *testing.T, h sidecarHeader, ix *Index) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := gob.NewEncoder(&b)
	if err := enc.Encode(h); err != nil {
		t.Fatal(err)
	}
	if ix != nil {
		if err := enc.Encode(ix); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestOpenKeepsOneSidecarPerParameterSet(t *testing.T) {
	root, _ := blocktest.Dataset(t, 4, 2, 40, 800)
	cache := t.TempDir()
	sets := []Options{
		{BlockSize: 1000},
		{BlockSize: 2000},
		{BlockSize: 2000, SkipCorrupt: true},
		{BlockSize: 2000, Include: []string{"f0.*"}},
	}
	var built []*Index
	for i, o := range sets {
		o.CacheDir = cache
		ix, fromCache, _ := openLogged(t, root, o)
		if fromCache {
			t.Fatalf("set %d (%+v) came from another set's sidecar", i, sets[i])
		}
		if n := len(sidecars(t, cache)); n != i+1 {
			t.Fatalf("%d sidecars after %d parameter sets", n, i+1)
		}
		built = append(built, ix)
	}
	for i, o := range sets {
		o.CacheDir = cache
		ix, fromCache, _ := openLogged(t, root, o)
		if !fromCache || !reflect.DeepEqual(ix, built[i]) {
			t.Fatalf("set %d (%+v): fromCache %v, same index %v", i, sets[i], fromCache, reflect.DeepEqual(ix, built[i]))
		}
		if ix.BlockSize != o.BlockSize {
			t.Fatalf("set %d: BlockSize %d", i, ix.BlockSize)
		}
	}
}

func TestOpenRefusesCacheDirInsideSource(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache func(root string) string
		chdir bool // run from inside the source
	}{
		{"the source itself", func(root string) string { return root }, false},
		{"a subdirectory", func(root string) string { return filepath.Join(root, "cache") }, false},
		{"a nested new directory", func(root string) string { return filepath.Join(root, "a", "b", "c") }, false},
		{"a path through ..", func(root string) string { return filepath.Join(root, "x") + "/../cache" }, false},
		{"a directory named ..cache", func(root string) string { return filepath.Join(root, "..cache") }, false},
		{"a relative path from inside the source", func(string) string { return "cache" }, true},
		{"a relative path to the source", func(string) string { return "." }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := blocktest.Dataset(t, 5, 1, 5, 100)
			before := tree(t, root)
			if tc.chdir {
				t.Chdir(root)
			}
			cache := tc.cache(root)
			_, _, err := Open(t.Context(), blocktest.Dir(t, root, false), Options{CacheDir: cache})
			if err == nil || !strings.Contains(err.Error(), "inside the source") {
				t.Fatalf("Open with CacheDir %s: err %v, want a refusal", cache, err)
			}
			if after := tree(t, root); !slices.Equal(before, after) {
				t.Fatalf("source changed:\n%q\n%q", before, after)
			}
		})
	}
}

func TestOpenAcceptsCacheDirNextToOrAboveSource(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache func(t *testing.T, root string) string
	}{
		{"a sibling sharing the name as prefix", func(_ *testing.T, root string) string { return root + "-cache" }},
		{"the parent", func(_ *testing.T, root string) string { return filepath.Dir(root) }},
		{"elsewhere", func(t *testing.T, _ string) string { return t.TempDir() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			root := filepath.Join(parent, "src")
			blocktest.WriteRecords(t, root, "a.tfrecord", [][]byte{{1}})
			cache := tc.cache(t, root)
			before := tree(t, root)
			if _, _, err := Open(t.Context(), blocktest.Dir(t, root, false), Options{CacheDir: cache}); err != nil {
				t.Fatal(err)
			}
			if len(sidecars(t, cache)) != 1 {
				t.Fatalf("no sidecar in %s", cache)
			}
			if after := tree(t, root); !slices.Equal(before, after) {
				t.Fatalf("source changed:\n%q\n%q", before, after)
			}
		})
	}
}

func TestOpenNeverWritesInsideSource(t *testing.T) {
	root, files := blocktest.Dataset(t, 6, 3, 30, 500)
	blocktest.WriteRecords(t, root, "sub/deeper/x.tfrecord", [][]byte{{1}})
	cache := t.TempDir()
	before := tree(t, root)
	for _, o := range []Options{{CacheDir: cache}, {CacheDir: cache}, {CacheDir: cache, BlockSize: 100}, {CacheDir: cache, SkipCorrupt: true}} {
		openLogged(t, root, o)
	}
	if after := tree(t, root); !slices.Equal(before, after) {
		t.Fatalf("source changed:\n%q\n%q", before, after)
	}
	// A rebuild after a change writes nothing inside the source either.
	fi, _ := os.Stat(files[0].Path)
	blocktest.SetMtime(t, files[0].Path, fi.ModTime().Add(time.Second).UnixNano())
	before = tree(t, root)
	if _, fromCache, _ := openLogged(t, root, Options{CacheDir: cache}); fromCache {
		t.Fatal("not rebuilt")
	}
	if after := tree(t, root); !slices.Equal(before, after) {
		t.Fatalf("source changed:\n%q\n%q", before, after)
	}
	if len(sidecars(t, cache)) != 3 {
		t.Fatalf("sidecars %v, want 3", sidecars(t, cache))
	}
}

func TestOpenStillWorksWhenTheSidecarCannotBeSaved(t *testing.T) {
	root, _ := blocktest.Dataset(t, 7, 1, 5, 100)
	notDir := filepath.Join(t.TempDir(), "file")
	blocktest.WriteBytes(t, notDir, []byte("x"))
	ix, fromCache, log := openLogged(t, root, Options{CacheDir: filepath.Join(notDir, "cache")})
	if ix == nil || fromCache {
		t.Fatalf("ix %v, fromCache %v", ix, fromCache)
	}
	if !strings.Contains(log, "could not save index sidecar") {
		t.Fatalf("log does not warn about the sidecar:\n%s", log)
	}
}

func TestOpenNeverTrustsADamagedSidecar(t *testing.T) {
	root, _ := blocktest.Dataset(t, 2, 2, 40, 500)
	cache := t.TempDir()
	o := Options{BlockSize: 2048, CacheDir: cache}
	good, _, _ := openLogged(t, root, o)
	path := sidecars(t, cache)[0]
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip every 7th byte in turn: each damaged sidecar must be rebuilt or,
	// where the flip lands in a byte gob ignores, still give the same index.
	for i := 0; i < len(orig); i += 7 {
		bad := bytes.Clone(orig)
		bad[i] ^= 0x55
		blocktest.WriteBytes(t, path, bad)
		ix, fromCache, _ := openLogged(t, root, o)
		if fromCache && !reflect.DeepEqual(ix, good) {
			t.Fatalf("flipping byte %d of the sidecar gave a different index that was trusted", i)
		}
	}
}

// A probed index saved at one block size serves a first open at a
// multiple of it with its blocks merged, as a fresh probe at that size
// cuts them (issue 25: a mount after `corgifs index` at another block
// size probed every object again); a smaller block size is probed anew.
func TestProbedSidecarAtADivisorOfTheBlockSizeIsMergedNotProbedAgain(t *testing.T) {
	root, _ := blocktest.Dataset(t, 4, 2, 300, 900)
	cache := t.TempDir()
	openLogged(t, root, Options{BlockSize: 4 << 10, Probe: true, CacheDir: cache})
	for _, bs := range []int64{8 << 10, 32 << 10} {
		ix, fromCache, log := openLogged(t, root, Options{BlockSize: bs, Probe: true, CacheDir: cache})
		if !fromCache || !strings.Contains(log, "reusing the probed index built at another block size") {
			t.Fatalf("block size %d after an index at 4096: fromCache %v, log:\n%s", bs, fromCache, log)
		}
		fresh := build(t, root, Options{BlockSize: bs, Probe: true})
		if !reflect.DeepEqual(ix.Blocks, fresh.Blocks) || ix.Records != fresh.Records || ix.Bytes != fresh.Bytes || ix.BlockSize != bs {
			t.Fatalf("block size %d: merged index has %d blocks (%d records, %d bytes), a fresh probe %d (%d, %d)",
				bs, len(ix.Blocks), ix.Records, ix.Bytes, len(fresh.Blocks), fresh.Records, fresh.Bytes)
		}
		if len(ix.Blocks) >= 300*4*900/int(bs)+8 || len(ix.Blocks) < 4 {
			t.Fatalf("block size %d: %d blocks", bs, len(ix.Blocks))
		}
	}
	if _, _, log := openLogged(t, root, Options{BlockSize: 2 << 10, Probe: true, CacheDir: cache}); strings.Contains(log, "reusing") {
		t.Fatalf("a smaller block size reused a larger one's index:\n%s", log)
	}
}
