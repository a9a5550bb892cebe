package index

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/internal/cachedir"
	"github.com/corgifs/corgifs/source"
)

// sidecarVersion changes whenever the saved Index layout or the way blocks
// are cut changes, so that an old sidecar is rebuilt rather than misread.
// 6: local files have a Version (local.Version).
// 7: every block of a full index has a CRC (TFRecord's too), which the disk
// cache checks its entries against; local versions hold the device, inode
// and change time.
// 8: a full index's block also ends where CapCuts says (very many tiny
// records).
const sidecarVersion = 8

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
	// Format is the --format name, "" when it is chosen from the file
	// names, and FormatOptions its settings.
	Format        string
	FormatOptions formats.Options
	// Compression is Options.Compression; absent from sidecars written
	// before compressed files were read, which decode as "": auto.
	Compression string
	// Probe says the index was probed (--index probe): a probed and a
	// full index of one source are two sidecars.
	Probe bool
}

// header returns the sidecar header of an index of root built with o.
func header(root string, o Options) sidecarHeader {
	h := sidecarHeader{Magic: sidecarMagic, Version: sidecarVersion, Root: root, BlockSize: o.BlockSize, Include: o.Include,
		SkipCorrupt: o.SkipCorrupt, FollowSymlinks: o.FollowSymlinks, FormatOptions: o.FormatOptions, Compression: o.Compression, Probe: o.Probe}
	if o.Format != nil {
		h.Format = o.Format.Name()
	}
	return h
}

// DefaultCacheDir returns $XDG_CACHE_HOME/corgifs, or ~/.cache/corgifs, or
// for root without either, /var/cache/corgifs. Never a shared directory
// such as /tmp: whoever creates the directory first could plant an index
// there. Without HOME and XDG_CACHE_HOME (a service, a container) a user
// other than root gets an error saying what to pass instead.
func DefaultCacheDir() (string, error) {
	// The XDG spec says to ignore relative paths.
	if d := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "corgifs"), nil
	}
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".cache", "corgifs"), nil
	}
	if os.Geteuid() == 0 {
		return "/var/cache/corgifs", nil
	}
	return "", errors.New("no directory for the index cache: HOME and XDG_CACHE_HOME are both unset, and corgifs does not fall back to a shared directory such as /tmp, where another user could plant an index; pass {cache-dir} DIR (a directory that only you can write) or set XDG_CACHE_HOME")
}

// name is the file name of the sidecar in the cache directory.
func (h sidecarHeader) name() string {
	key := fmt.Appendf(nil, "%s\x00%d\x00%s\x00%v", h.Root, h.BlockSize, strings.Join(h.Include, "\x00"), h.SkipCorrupt)
	if h.FollowSymlinks {
		key = append(key, "\x00follow-symlinks"...)
	}
	key = fmt.Appendf(key, "\x00format=%s\x00%+v", h.Format, h.FormatOptions)
	if h.Compression != "" && h.Compression != CompressionAuto {
		key = append(key, "\x00compression="+h.Compression...)
	}
	if h.Probe {
		key = append(key, "\x00index=probe"...)
	}
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:12]) + ".index"
}

// Open returns the index of src: the cached sidecar when every source file
// is unchanged (same names, sizes and modification times) and its blocks
// tile the files, else a new index, which it saves. Why a sidecar is not
// used is logged. A cache directory inside the source, or one that another
// user owns or others may write, is an error.
func Open(ctx context.Context, src source.Source, o Options) (ix *Index, fromCache bool, err error) {
	o.fill()
	root := src.String()
	h := header(src.ID(), o)
	name := h.name()
	var dir *cachedir.Dir
	var noDir error // why there is no cache directory to save in
	if o.CacheDir != "" {
		path, err := cacheDirFor(o.CacheDir, src)
		if err != nil {
			return nil, false, err
		}
		dir, noDir = cachedir.OpenPath(path)
		if errors.Is(noDir, ErrUnsafeCacheDir) {
			return nil, false, cachedir.ForFlag(noDir, "{cache-dir}", "its index")
		}
		if dir != nil {
			defer dir.Close()
		}
	}
	if dir != nil {
		var why string
		if dir.Exists(name + staleSuffix) {
			why = "a block failed its check while served, though its file kept its version (size and modification time, or ETag)"
			if stale, err := dir.ReadFile(name+staleSuffix, 4<<10); err == nil {
				why += ": " + string(stale)
			}
			// A kept record count may be what was wrong (counts.go).
			if err := dir.Remove(countsLogName(src)); err != nil {
				o.Logger.Warn("could not remove the record counts kept by earlier mounts; the blocks they are wrong for fail their check again", "err", err)
			}
		} else {
			ix, why = loadSidecar(dir, name, h)
			if ix == nil && why == "" {
				// None at this block size: a probed one at a divisor of
				// it serves, its blocks merged (rebase.go).
				if ix = rebased(dir, h, o.Logger); ix != nil {
					if err := saveSidecar(dir, name, h, ix); err != nil {
						o.Logger.Warn("could not save index sidecar; the next mount will index again", "err", err)
					}
				}
			}
			if err := ix.checkTables(o); err != nil {
				return nil, false, err
			}
			if ix != nil {
				ix.src, ix.Root = src, root
				why = ix.changed(ctx, o)
				if why == "" {
					return ix, true, nil
				}
				if ix.Probed && o.Probe {
					// Only what changed is probed again.
					o.Logger.Info("rebuilding index: probing the changed files alone", "source", root, "reason", why)
					nix, err := ix.reprobe(ctx, o)
					if err == nil {
						ix = nix
						if err := saveSidecar(dir, name, h, ix); err != nil {
							o.Logger.Warn("could not save index sidecar; the next mount will index again", "err", err)
						}
						return ix, false, nil
					}
					o.Logger.Info("could not probe the changed files alone; probing every file", "source", root, "err", err)
				}
			}
		}
		if why != "" {
			o.Logger.Info("rebuilding index", "source", root, "reason", why)
		}
	}
	ix, err = Build(ctx, src, o)
	if err != nil {
		return nil, false, err
	}
	switch {
	case dir != nil:
		if err := saveSidecar(dir, name, h, ix); err != nil {
			o.Logger.Warn("could not save index sidecar; the next mount will index again", "err", err)
		} else if err := dir.Remove(name + staleSuffix); err != nil {
			o.Logger.Warn("could not remove the stale mark of the index sidecar; the next mount will index again", "err", err)
		}
	case noDir != nil:
		o.Logger.Warn("could not save index sidecar; the next mount will index again", "err", noDir)
	}
	return ix, false, nil
}

// ErrUnsafeCacheDir marks a cache directory that corgifs refuses to use
// (see cachedir.ErrUnsafe).
var ErrUnsafeCacheDir = cachedir.ErrUnsafe

// cacheDirFor resolves the cache directory of an index of src; only a
// local source can hold it.
func cacheDirFor(dir string, src source.Source) (string, error) {
	if !IsLocal(src) {
		return cachedir.Resolve(dir, "")
	}
	return cachedir.Resolve(dir, src.String())
}

// staleSuffix names the file, beside a sidecar, that marks it stale: the
// loader found a block that no longer matches the index while the file's
// size and modification time did not change (the bytes were damaged in
// place, or rewritten with the old time restored), which the check of Open
// cannot see. The file holds the reason; the next Open rebuilds.
const staleSuffix = ".stale"

// openRootCacheDir opens the cache directory of the index of src under
// o.CacheDir, with o as an index of it sees them. It returns a nil
// directory and no error when o has no cache directory.
func openRootCacheDir(src source.Source, o Options) (*cachedir.Dir, Options, error) {
	o.fill()
	if o.CacheDir == "" {
		return nil, o, nil
	}
	path, err := cacheDirFor(o.CacheDir, src)
	if err != nil {
		return nil, o, err
	}
	dir, err := cachedir.OpenPath(path)
	return dir, o, err
}

// MarkStale makes the next Open of src with o rebuild the index, giving
// reason. The loader's OnDamage calls it when a block no longer matches the
// index although its file kept its version (size and modification time, or
// ETag). A file whose version changed is not marked: Open sees the change
// and, for a probed index, indexes that file alone.
func MarkStale(src source.Source, o Options, reason string) error {
	dir, o, err := openRootCacheDir(src, o)
	if dir == nil || err != nil {
		return cachedir.ForFlag(err, "{cache-dir}", "its index")
	}
	defer dir.Close()
	h := header(src.ID(), o)
	return dir.WriteFile(h.name()+staleSuffix, func(w io.Writer) error {
		_, err := io.WriteString(w, reason)
		return err
	})
}

// changed says why the index no longer matches the files on disk, or "".
// The files are selected as Build selects them, with the options o.
func (ix *Index) changed(ctx context.Context, o Options) string {
	o.FollowSymlinks = ix.FollowSymlinks
	files, f, err := selectFiles(ctx, ix.Source(), o)
	if err != nil {
		return err.Error()
	}
	if f.Name() != ix.Fmt().Name() {
		return fmt.Sprintf("the files are now %s, not %s", f.Name(), ix.Fmt().Name())
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
		case o.Version != f.Version:
			return fmt.Sprintf("source file %s changed (version %q, was %q)", f.Path, f.Version, o.Version)
		}
		delete(old, f.Path)
	}
	for p := range old {
		return "source file " + p + " was removed"
	}
	return ""
}

// loadSidecar reads the sidecar name in dir; a missing, untrusted,
// corrupt, old or foreign one, or one whose blocks do not tile its files,
// gives nil and the reason (empty when there simply is none).
func loadSidecar(dir *cachedir.Dir, name string, want sidecarHeader) (*Index, string) {
	path := filepath.Join(dir.Path(), name)
	f, err := dir.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ""
	} else if err != nil {
		return nil, "cannot use index sidecar: " + err.Error()
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
	if h.Root != want.Root || h.BlockSize != want.BlockSize || h.SkipCorrupt != want.SkipCorrupt || h.FollowSymlinks != want.FollowSymlinks || strings.Join(h.Include, "\x00") != strings.Join(want.Include, "\x00") ||
		h.Format != want.Format || h.FormatOptions != want.FormatOptions || h.Compression != want.Compression || h.Probe != want.Probe {
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
	if err := ix.setFormat(); err != nil {
		return nil, "index sidecar " + path + " names a format this corgifs does not know: " + err.Error()
	}
	if want.Format != "" && ix.Format != want.Format {
		return nil, "index sidecar belongs to other parameters"
	}
	if err := ix.checkTiling(); err != nil {
		return nil, "index sidecar " + path + " does not match how its blocks must cut the files (not written by this corgifs?): " + err.Error()
	}
	if err := ix.checkCompressedCuts(); err != nil {
		return nil, "index sidecar " + path + " cuts compressed files at access points, as older versions did; rebuilding it to cut them as their decompressed copies: " + err.Error()
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

// saveSidecar writes the index as the sidecar name in dir, atomically: a
// new file renamed into place.
func saveSidecar(dir *cachedir.Dir, name string, h sidecarHeader, ix *Index) error {
	var body bytes.Buffer
	if err := gob.NewEncoder(&body).Encode(ix); err != nil {
		return err
	}
	return dir.WriteFile(name, func(f io.Writer) error {
		w := bufio.NewWriter(f)
		enc := gob.NewEncoder(w)
		if err := enc.Encode(h); err != nil {
			return err
		}
		if err := enc.Encode(sidecarBody{Sum: sha256.Sum256(body.Bytes()), Index: body.Bytes()}); err != nil {
			return err
		}
		return w.Flush()
	})
}

// checkTiling says how the blocks of a decoded index fail to cut its files
// the way Build cuts them: the blocks of each file, in file order, and its
// damaged ranges must cover it exactly, from offset 0 to its size, without
// a gap or an overlap; every block holds records, whose frame lengths add
// up to its length; and the counts agree. The sidecar's checksum only proves
// that it is intact: one re-encoded with block 1 replaced by block 0 would
// serve block 0's records twice and block 1's never. What it cannot check,
// that the records really start where the frame lengths say, the loader
// checks as it splits each block.
func (ix *Index) checkTiling() error {
	damaged := make(map[string][]Damage)
	for _, d := range ix.Damaged {
		damaged[d.File] = append(damaged[d.File], d)
	}
	minFrame := formats.PayloadLen(ix.Fmt(), 0)
	minFrame = max(1, -minFrame) // TFRecord: the framing, else one byte
	if ix.Probed && (ix.Frames != nil || ix.RecordCRCs != nil) {
		return fmt.Errorf("a probed index with %d frame lengths and %d record checksums", len(ix.Frames), len(ix.RecordCRCs))
	}
	if !ix.Probed && (ix.Fmt().Checksummed() != (ix.RecordCRCs == nil) || (ix.RecordCRCs != nil && len(ix.RecordCRCs) != len(ix.Frames))) {
		return fmt.Errorf("%d record checksums for %d records of format %s", len(ix.RecordCRCs), len(ix.Frames), ix.Fmt().Name())
	}
	var r, records, total int64
	b := 0
	for fi, f := range ix.Files {
		dmg := damaged[f.Path]
		delete(damaged, f.Path)
		if err := f.checkAccess(); err != nil {
			return err
		}
		if !(0 <= f.Head.Start && f.Head.Start <= f.From && f.From <= f.To && f.To <= f.Head.End && f.Head.End <= f.dataSize()) {
			return fmt.Errorf("%s (%d bytes): records in [%d, %d) outside its header's [%d, %d)", f.Path, f.Size, f.From, f.To, f.Head.Start, f.Head.End)
		}
		at, fileRecords := f.From, int64(0)
		for {
			switch {
			case b < len(ix.Blocks) && ix.Blocks[b].File == int32(fi) && ix.Blocks[b].Offset == at:
				blk := ix.Blocks[b]
				if ix.Probed {
					// No frames to check: the loader checks that the
					// records tile each block.
					if blk.Records < 0 || blk.Len <= 0 || blk.Records == 0 && !ix.CountsUnknown || blk.CRC != 0 {
						return fmt.Errorf("block %d (%s at offset %d) of a probed index has %d records, %d bytes and CRC %08x", b, f.Path, at, blk.Records, blk.Len, blk.CRC)
					}
					fileRecords += int64(blk.Records)
					total += blk.Len + int64(len(ix.Tail(blk)))
					at += blk.Len
					b++
					continue
				}
				if blk.Records <= 0 || blk.Len <= 0 || r+int64(blk.Records) > int64(len(ix.Frames)) {
					return fmt.Errorf("block %d (%s at offset %d) has %d records and %d bytes, with %d frame lengths left", b, f.Path, at, blk.Records, blk.Len, int64(len(ix.Frames))-r)
				}
				var n int64
				for _, fr := range ix.Frames[r : r+int64(blk.Records)] {
					if int64(fr) < minFrame {
						return fmt.Errorf("block %d (%s at offset %d) has a frame of %d bytes", b, f.Path, at, fr)
					}
					n += int64(fr)
				}
				if n != blk.Len+int64(len(ix.Tail(blk))) {
					return fmt.Errorf("block %d (%s at offset %d) is %d bytes, its %d frames %d", b, f.Path, at, blk.Len, blk.Records, n)
				}
				r += int64(blk.Records)
				fileRecords += int64(blk.Records)
				total += blk.Len + int64(len(ix.Tail(blk)))
				at += blk.Len
				b++
				continue
			case len(dmg) > 0 && dmg[0].From == at && dmg[0].To > at:
				at = dmg[0].To
				dmg = dmg[1:]
				continue
			}
			break
		}
		if at != f.To {
			next := "nothing"
			if b < len(ix.Blocks) {
				next = fmt.Sprintf("block %d (file %d at offset %d)", b, ix.Blocks[b].File, ix.Blocks[b].Offset)
			}
			return fmt.Errorf("%s (%d bytes): the blocks stop covering it at offset %d, where %s follows", f.Path, f.Size, at, next)
		}
		if len(dmg) > 0 {
			return fmt.Errorf("%s: damaged range [%d, %d) lies over its blocks", f.Path, dmg[0].From, dmg[0].To)
		}
		if fileRecords != f.Records {
			return fmt.Errorf("%s: its blocks hold %d records, the file %d", f.Path, fileRecords, f.Records)
		}
		records += fileRecords
	}
	switch {
	case b != len(ix.Blocks):
		return fmt.Errorf("block %d (file %d at offset %d) is out of place", b, ix.Blocks[b].File, ix.Blocks[b].Offset)
	case len(damaged) > 0:
		for p := range damaged {
			return fmt.Errorf("damaged range of %s, which is not indexed", p)
		}
	case r != int64(len(ix.Frames)) || records != ix.Records || total != ix.Bytes:
		if ix.Probed && r == 0 && records == ix.Records && total == ix.Bytes {
			return nil
		}
		return fmt.Errorf("%d records and %d bytes in the blocks, %d frame lengths, index says %d records and %d bytes", records, total, len(ix.Frames), ix.Records, ix.Bytes)
	}
	return nil
}
