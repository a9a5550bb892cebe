package blockcache

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// sidecarVersion changes whenever the saved Index layout or the way blocks
// are cut changes, so that an old sidecar is rebuilt rather than misread.
const sidecarVersion = 3

const sidecarMagic = "corgifs-index"

type sidecarHeader struct {
	Magic       string
	Version     int
	Root        string
	BlockSize   int64
	Include     []string
	SkipCorrupt bool
	// FollowSymlinks is absent from sidecars written before it existed,
	// which decode as false: what they were built with.
	FollowSymlinks bool
}

// DefaultCacheDir returns $XDG_CACHE_HOME/corgifs, or ~/.cache/corgifs.
func DefaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "corgifs")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "corgifs")
	}
	return filepath.Join(os.TempDir(), "corgifs-cache")
}

func (h sidecarHeader) path(dir string) string {
	key := fmt.Appendf(nil, "%s\x00%d\x00%s\x00%v", h.Root, h.BlockSize, strings.Join(h.Include, "\x00"), h.SkipCorrupt)
	if h.FollowSymlinks {
		key = append(key, "\x00follow-symlinks"...)
	}
	sum := sha256.Sum256(key)
	return filepath.Join(dir, hex.EncodeToString(sum[:12])+".index")
}

// Open returns the index of root: the cached sidecar when every source file
// is unchanged (same names, sizes and modification times), else a new index,
// which it saves. Why a sidecar is not used is logged.
func Open(ctx context.Context, root string, o Options) (ix *Index, fromCache bool, err error) {
	o.fill()
	root, err = resolveRoot(root)
	if err != nil {
		return nil, false, err
	}
	if o.CacheDir != "" {
		// Both paths absolute: filepath.Rel fails on a relative CacheDir,
		// which would skip the check. A name such as "..cache" is inside.
		if o.CacheDir, err = filepath.Abs(o.CacheDir); err != nil {
			return nil, false, err
		}
		if rel, err := filepath.Rel(root, o.CacheDir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, false, fmt.Errorf("cache directory %s is inside the source %s; corgifs never writes inside the source (choose another --cache-dir)", o.CacheDir, root)
		}
	}
	h := sidecarHeader{Magic: sidecarMagic, Version: sidecarVersion, Root: root, BlockSize: o.BlockSize, Include: o.Include, SkipCorrupt: o.SkipCorrupt, FollowSymlinks: o.FollowSymlinks}
	if o.CacheDir != "" {
		path := h.path(o.CacheDir)
		var why string
		if stale, err := os.ReadFile(path + staleSuffix); err == nil {
			why = "a block failed its check while served, though its file kept its size and modification time: " + string(stale)
		} else {
			ix, why = loadSidecar(path, h)
			if ix != nil {
				why = ix.changed(o.Include, o.Logger)
				if why == "" {
					return ix, true, nil
				}
			}
		}
		if why != "" {
			o.Logger.Info("rebuilding index", "source", root, "reason", why)
		}
	}
	ix, err = Build(ctx, root, o)
	if err != nil {
		return nil, false, err
	}
	if o.CacheDir != "" {
		if err := saveSidecar(o.CacheDir, h, ix); err != nil {
			o.Logger.Warn("could not save index sidecar; the next mount will index again", "err", err)
		} else {
			os.Remove(h.path(o.CacheDir) + staleSuffix)
		}
	}
	return ix, false, nil
}

// staleSuffix names the file, beside a sidecar, that marks it stale: the
// loader found a block that no longer matches the index while the file's
// size and modification time did not change (the bytes were damaged in
// place, or rewritten with the old time restored), which the check of Open
// cannot see. The file holds the reason; the next Open rebuilds.
const staleSuffix = ".stale"

// MarkStale makes the next Open of root with o rebuild the index, giving
// reason. The loader's OnDamage calls it when a block no longer matches the
// index although its file kept its size and modification time.
func MarkStale(root string, o Options, reason string) error {
	o.fill()
	root, err := resolveRoot(root)
	if err != nil || o.CacheDir == "" {
		return err
	}
	if o.CacheDir, err = filepath.Abs(o.CacheDir); err != nil {
		return err
	}
	h := sidecarHeader{Magic: sidecarMagic, Version: sidecarVersion, Root: root, BlockSize: o.BlockSize, Include: o.Include, SkipCorrupt: o.SkipCorrupt, FollowSymlinks: o.FollowSymlinks}
	return os.WriteFile(h.path(o.CacheDir)+staleSuffix, []byte(reason), 0o644)
}

// changed says why the index no longer matches the files on disk, or "".
func (ix *Index) changed(include []string, log *slog.Logger) string {
	files, err := listFiles(ix.Root, include, ix.FollowSymlinks, log)
	if err != nil {
		return err.Error()
	}
	old := make(map[string]File, len(ix.Files))
	for _, f := range ix.Files {
		old[f.Path] = f
	}
	for _, f := range files {
		o, ok := old[f.Path]
		switch {
		case !ok:
			return "new source file " + f.Path
		case o.Size != f.Size:
			return fmt.Sprintf("source file %s changed size (%d -> %d bytes)", f.Path, o.Size, f.Size)
		case o.Mtime != f.Mtime:
			return fmt.Sprintf("source file %s changed (modification time)", f.Path)
		}
		delete(old, f.Path)
	}
	for p := range old {
		return "source file " + p + " was removed"
	}
	return ""
}

// loadSidecar reads a sidecar; a missing, corrupt, old or foreign one gives
// nil and the reason (empty when there simply is none).
func loadSidecar(path string, want sidecarHeader) (*Index, string) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ""
	} else if err != nil {
		return nil, "cannot read index sidecar: " + err.Error()
	}
	defer f.Close()
	dec := gob.NewDecoder(bufio.NewReader(f))
	var h sidecarHeader
	if err := dec.Decode(&h); err != nil || h.Magic != sidecarMagic {
		return nil, "index sidecar " + path + " is not a corgifs index"
	}
	if h.Version != want.Version {
		return nil, fmt.Sprintf("index sidecar has version %d, want %d", h.Version, want.Version)
	}
	if h.Root != want.Root || h.BlockSize != want.BlockSize || h.SkipCorrupt != want.SkipCorrupt || h.FollowSymlinks != want.FollowSymlinks || strings.Join(h.Include, "\x00") != strings.Join(want.Include, "\x00") {
		return nil, "index sidecar belongs to other parameters"
	}
	var body sidecarBody
	if err := dec.Decode(&body); err != nil {
		return nil, "index sidecar " + path + " is corrupt: " + err.Error()
	}
	if sha256.Sum256(body.Index) != body.Sum {
		return nil, "index sidecar " + path + " is corrupt: checksum mismatch"
	}
	var ix Index
	if err := gob.NewDecoder(bytes.NewReader(body.Index)).Decode(&ix); err != nil {
		return nil, "index sidecar " + path + " is corrupt: " + err.Error()
	}
	return &ix, ""
}

// sidecarBody carries the encoded index with its SHA-256, so that a damaged
// sidecar is rebuilt rather than trusted: gob alone would decode many
// damaged files into a wrong index.
type sidecarBody struct {
	Sum   [32]byte
	Index []byte
}

// saveSidecar writes the index atomically: a temporary file renamed into place.
func saveSidecar(dir string, h sidecarHeader, ix *Index) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".index-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	enc := gob.NewEncoder(w)
	if err := enc.Encode(h); err != nil {
		tmp.Close()
		return err
	}
	var body bytes.Buffer
	if err := gob.NewEncoder(&body).Encode(ix); err != nil {
		tmp.Close()
		return err
	}
	if err := enc.Encode(sidecarBody{Sum: sha256.Sum256(body.Bytes()), Index: body.Bytes()}); err != nil {
		tmp.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), h.path(dir))
}
