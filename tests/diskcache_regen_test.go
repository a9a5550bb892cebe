package tests

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// regenerate rewrites every file of src with the bytes of the file of the
// same name under fresh, which must be as long, and puts its modification
// time back (touch -r): as new files renamed over the old ones, or, if
// inPlace, written into the very same inodes.
func regenerate(t *testing.T, src, fresh string, inPlace bool) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if len(names) == 0 {
		t.Fatalf("no files under %s", src)
	}
	for _, name := range names {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(fresh, filepath.Base(name)))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != fi.Size() {
			t.Fatalf("%s: the new data has %d bytes, the old %d: the test needs equal sizes", filepath.Base(name), len(b), fi.Size())
		}
		if inPlace {
			f, err := os.OpenFile(name, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(b, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			tmp := filepath.Join(src, ".regen")
			writeFile(t, tmp, b)
			if err := os.Rename(tmp, name); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(name, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		now, err := os.Stat(name)
		if err != nil || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
			t.Fatalf("%s: size and mtime not kept: %v, %v", name, now, err)
		}
	}
}

// TestDiskCacheAfterADatasetRegeneratedWithEqualSizesAndMtimesServesTheNewRecords
// fills a disk cache from a dataset, regenerates the dataset with other
// records in files of the same sizes and modification times (touch -r),
// deletes the index sidecar and mounts again with the same --disk-cache:
// the mount must serve exactly the records `corgifs order` gives for the
// new data, none out of the old entries. Once with new files renamed over
// the old ones, once written into the same inodes.
func TestDiskCacheAfterADatasetRegeneratedWithEqualSizesAndMtimesServesTheNewRecords(t *testing.T) {
	for _, c := range []struct {
		name    string
		inPlace bool
	}{{"renamed over", false}, {"same inodes", true}} {
		t.Run(c.name, func(t *testing.T) {
			src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
			fresh := genSynthetic(t, 3000, 16, 4, 4, "clustered", "--seed", "8")
			cache, dc := t.TempDir(), filepath.Join(t.TempDir(), "dc")
			flags := []string{"--seed", "11", "--block-size", "16KiB"}
			mflags := append(slices.Clone(flags), "--cache-dir", cache, "--disk-cache", dc)

			m := startMount(t, src, mflags...)
			old := m.read(0, 0, 1)
			if st := m.settled(); st.DiskCache.Written == 0 || st.DiskCache.Written != st.SourceRequests+st.WalkTaken {
				t.Fatalf("the first mount cached %d of %d blocks, want all", st.DiskCache.Written, st.SourceRequests)
			}
			m.stop()

			regenerate(t, src, fresh, c.inPlace)
			sidecars, _ := filepath.Glob(filepath.Join(cache, "*.index"))
			if len(sidecars) == 0 {
				t.Fatalf("no index sidecar in %s", cache)
			}
			for _, s := range sidecars {
				if err := os.Remove(s); err != nil {
					t.Fatal(err)
				}
			}

			want := orderPart(t, src, append(slices.Clone(flags), "--cache-dir", t.TempDir()), 0, 0, 1).data
			if bytes.Equal(want, old) {
				t.Fatal("the regenerated dataset serves the same epoch as the old one: the test proves nothing")
			}
			m2 := startMount(t, src, mflags...)
			if got := m2.read(0, 0, 1); !bytes.Equal(got, want) {
				st := m2.cacheStats()
				t.Fatalf("epoch 0 after the regeneration: %d bytes served differ from the %d `corgifs order` gives for the new data (%d disk-cache hits)\n%s",
					len(got), len(want), st.DiskCache.Hits, m2.log)
			}
			// A block loaded twice in the epoch (prefetched, dropped from
			// memory, loaded again) may come from the disk cache the second
			// time, with the new bytes: every byte must have come from the
			// source once.
			st := m2.settled()
			if e, d := st.Epochs[0], st.DiskCache; e.SourceBytes < int64(len(want)) || d.Mismatched != 0 || d.Damaged != 0 {
				t.Fatalf("stats.json epoch 0 %+v, disk_cache %+v: want all %d bytes from the source, no mismatch and no damage (every key changed with the files)", e, *d, len(want))
			}
			// The new bytes are cached and served in the next epoch.
			want1 := orderPart(t, src, append(slices.Clone(flags), "--cache-dir", t.TempDir()), 1, 0, 1).data
			if got := m2.read(1, 0, 1); !bytes.Equal(got, want1) {
				t.Fatalf("epoch 1: %d bytes served differ from the %d `corgifs order` gives", len(got), len(want1))
			}
			if st := m2.cacheStats(); st.Epochs[1].DiskCacheBytes == 0 || st.DiskCache.Mismatched != 0 {
				t.Fatalf("stats.json epoch 1: %+v, disk_cache %+v: want bytes from the disk cache, none mismatched", st.Epochs[1], *st.DiskCache)
			}
		})
	}
}

// TestDiskCacheEntryWithItsRecordsSwappedIsRefetchedNeverServed forges the
// entries of a disk cache as a cache filled from other data under the
// same keys would hold them: the first two records of each block swapped,
// every frame still valid, the entry's own CRC recomputed. The next mount
// must serve exactly the order of the source, reading those blocks from the
// source, count every entry as mismatched and log it once.
func TestDiskCacheEntryWithItsRecordsSwappedIsRefetchedNeverServed(t *testing.T) {
	src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
	cache, dc := t.TempDir(), filepath.Join(t.TempDir(), "dc")
	flags := []string{"--seed", "12", "--block-size", "16KiB"}
	mflags := append(slices.Clone(flags), "--cache-dir", cache, "--disk-cache", dc)
	m := startMount(t, src, mflags...)
	m.read(0, 0, 1)
	st := m.settled()
	m.stop()

	entries, _ := filepath.Glob(filepath.Join(dc, "b*"))
	if int64(len(entries)) != st.DiskCache.Written || len(entries) == 0 {
		t.Fatalf("%d entries, %d written", len(entries), st.DiskCache.Written)
	}
	for _, e := range entries {
		swapFirstRecords(t, e)
	}

	want := orderPart(t, src, append(slices.Clone(flags), "--cache-dir", t.TempDir()), 1, 0, 1).data
	m2 := startMount(t, src, mflags...)
	if got := m2.read(1, 0, 1); !bytes.Equal(got, want) {
		t.Fatalf("epoch 1: %d bytes served differ from the %d `corgifs order` gives\n%s", len(got), len(want), m2.log)
	}
	st = m2.settled()
	if e, d := st.Epochs[1], st.DiskCache; d.Mismatched != int64(len(entries)) || e.SourceBytes < int64(len(want)) || d.Damaged != 0 {
		t.Fatalf("stats.json epoch 1 %+v, disk_cache %+v: want %d mismatched entries, all %d bytes of epoch 1 from the source, no damage", e, *d, len(entries), len(want))
	}
	if n := strings.Count(m2.log.String(), "disk cache entry holds other bytes"); n != 1 {
		t.Fatalf("%d log lines about entries of other bytes, want 1:\n%s", n, m2.log)
	}
}

// swapFirstRecords swaps the first two TFRecord frames of the data of the
// disk-cache entry at path (magic, CRC32C, key length, data length, lead,
// key, padding, data: the data ends the file) and writes the entry's CRC
// of the new data, as a cache filled from other valid records under the
// same key would hold it.
func swapFirstRecords(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 28 || string(b[:8]) != "corgidc2" {
		t.Fatalf("%s is not a disk-cache entry", path)
	}
	klen, dlen := int(binary.LittleEndian.Uint32(b[12:])), int(binary.LittleEndian.Uint64(b[16:]))
	if 28+klen+dlen > len(b) {
		t.Fatalf("%s: data length differs from its header", path)
	}
	data := b[len(b)-dlen:]
	n1 := 16 + int(binary.LittleEndian.Uint64(data))
	n2 := 16 + int(binary.LittleEndian.Uint64(data[n1:]))
	first, second := slices.Clone(data[:n1]), slices.Clone(data[n1:n1+n2])
	if bytes.Equal(first, second) {
		t.Fatalf("%s: its first two records are equal", path)
	}
	copy(data, second)
	copy(data[n2:], first)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
