package blockcache

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// probeCases are the format cases with larger files of TFRecord (records
// up to 3000 bytes, two of 20000 and 40000), WebDataset and npy, so that
// block sizes from a few bytes to a few KiB cut them many times.
func probeCases(t *testing.T) []blocktest.FormatCase {
	r := rand.New(rand.NewPCG(11, 12))
	big := map[string][]byte{}
	for i, n := range []int{300, 0, 120} {
		ps := blocktest.RandomPayloads(r, n, 3000)
		if n > 100 {
			ps[50] = make([]byte, 20000)
			ps[51] = make([]byte, 40000)
		}
		data, _ := blocktest.Frames(t, ps)
		big[fmt.Sprintf("f%d.tfrecord", i)] = data
	}
	return append(blocktest.FormatCases(t),
		blocktest.FormatCase{Format: formats.TFRecord{}, Files: big},
		blocktest.FormatCase{Format: formats.WDS{}, Files: map[string][]byte{"a.tar": blocktest.WDSBytes(t, "a", 300), "b.tar": blocktest.WDSBytes(t, "b", 1)}},
		blocktest.FormatCase{Format: formats.NPY{}, Files: map[string][]byte{"a.npy": blocktest.NPYBytes(2000, 7, 0), "b.npy": blocktest.NPYBytes(1, 7, 3)}},
	)
}

// A probed index cuts exactly the blocks a full index cuts, for every
// format and block size: the same files, record ranges and block ranges.
// Fixed and npy know their counts by arithmetic, the others learn them
// when loaded. CSV probes too (its files here are small, so the probe
// reads from their first row and is never in doubt) — the file with
// quoted newlines and the one without — rather than being scanned whole,
// which a block's record count would show.
func TestProbedIndexCutsTheSameBlocksAsAFullIndex(t *testing.T) {
	for _, c := range probeCases(t) {
		root := c.Write(t)
		for _, bs := range []int64{1, 100, 512, 1000, 4096, 64 << 10} {
			if bs <= 512 && sizeOf(c) > 16<<10 {
				continue // a probe at every few bytes of a large file: slow (under -race), and no more telling
			}
			t.Run(fmt.Sprintf("%s/%d-files/BlockSize=%d", c.Format.Name(), len(c.Files), bs), func(t *testing.T) {
				full := build(t, root, index.Options{BlockSize: bs, Format: c.Format})
				probed := build(t, root, index.Options{BlockSize: bs, Format: c.Format, Probe: true})
				if !probed.Probed {
					t.Fatalf("format %s: not a probed index", c.Format.Name())
				}
				if _, csv := c.Format.(formats.CSV); csv {
					for _, b := range probed.Blocks {
						if b.Records != 0 {
							t.Fatalf("block %+v of %s has its record count: the file was scanned whole, not probed", b, probed.Path(b.File))
						}
					}
				}
				compareIndexes(t, full, probed)
			})
		}
	}
}

// compareIndexes fails unless probed cuts the files as full does.
func compareIndexes(t *testing.T, full, probed *index.Index) {
	t.Helper()
	if len(full.Files) != len(probed.Files) {
		t.Fatalf("%d files, full index %d", len(probed.Files), len(full.Files))
	}
	for i, f := range full.Files {
		p := probed.Files[i]
		if p.Path != f.Path || p.From != f.From || p.To != f.To || p.Head.Start != f.Head.Start || p.Head.End != f.Head.End || string(p.Head.Key) != string(f.Head.Key) || string(p.Head.Tail) != string(f.Head.Tail) {
			t.Fatalf("file %d: probed %s records [%d, %d) head %+v; full %s [%d, %d) head %+v", i, p.Path, p.From, p.To, p.Head, f.Path, f.From, f.To, f.Head)
		}
	}
	if len(full.Blocks) != len(probed.Blocks) {
		t.Fatalf("%d blocks, full index %d: %v vs %v", len(probed.Blocks), len(full.Blocks), probed.Blocks, full.Blocks)
	}
	for i, b := range full.Blocks {
		p := probed.Blocks[i]
		if p.File != b.File || p.Offset != b.Offset || p.Len != b.Len || p.Records != 0 && p.Records != b.Records {
			t.Fatalf("block %d: probed %+v, full %+v", i, p, b)
		}
		if probed.Probed && p.CRC != 0 {
			t.Fatalf("block %d of a probed index has a CRC", i)
		}
	}
	if full.Bytes != probed.Bytes {
		t.Fatalf("%d bytes, full index %d", probed.Bytes, full.Bytes)
	}
	if !probed.CountsUnknown && probed.Records != full.Records {
		t.Fatalf("%d records known, full index %d", probed.Records, full.Records)
	}
	if probed.Probed && (probed.Frames != nil || probed.RecordCRCs != nil) {
		t.Fatal("a probed index has a record table")
	}
}

func sizeOf(c blocktest.FormatCase) int {
	n := 0
	for _, d := range c.Files {
		n += len(d)
	}
	return n
}

// A probed index loads every block into the records a full index loads,
// alone and all in one buffer, and learns every count on the way.
func TestProbedIndexLoadsTheRecordsOfAFullIndexAndLearnsTheirCounts(t *testing.T) {
	for _, c := range probeCases(t) {
		root := c.Write(t)
		t.Run(fmt.Sprintf("%s/%d-files", c.Format.Name(), len(c.Files)), func(t *testing.T) {
			o := index.Options{BlockSize: 3000, Format: c.Format}
			full := build(t, root, o)
			o.Probe = true
			probed := build(t, root, o)
			lf := NewLoader(full, LoaderOptions{MaxMemory: 64 << 20})
			lp := NewLoader(probed, LoaderOptions{MaxMemory: 64 << 20})
			all := Unit{}
			for id := range full.Blocks {
				all.Blocks = append(all.Blocks, int32(id))
			}
			units := []Unit{all}
			for _, id := range all.Blocks {
				units = append(units, blockUnit(id))
			}
			for _, u := range units {
				bf, err := lf.Get(t.Context(), u)
				if err != nil {
					t.Fatal(err)
				}
				bp, err := lp.Get(t.Context(), u)
				if err != nil {
					t.Fatalf("probed index, blocks %v: %v", u.Blocks, err)
				}
				if got, want := records(bp), records(bf); !slices.Equal(got, want) {
					t.Fatalf("blocks %v: probed index loads %q, full index %q", u.Blocks, got, want)
				}
				lf.Release(bf)
				lp.Release(bp)
			}
			if blocks, recs := lp.Learned(); blocks != len(full.Blocks) || recs != full.Records {
				t.Fatalf("learned %d blocks and %d records, the full index has %d and %d", blocks, recs, len(full.Blocks), full.Records)
			}
		})
	}
}

// fakeHeader returns the 12 bytes of a TFRecord frame header claiming n
// bytes of data, with a length CRC that checks.
func fakeHeader(n int) []byte {
	f := formats.AppendFrame(nil, make([]byte, n))
	return f[:formats.HeaderLen]
}

// A frame header planted in a payload, just after a multiple of the block
// size, has a length CRC that checks but no data that matches: the probe
// passes over it and cuts where the full index cuts.
func TestPlantedTFRecordHeaderInAPayloadIsNotTakenForABoundary(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	ps := blocktest.RandomPayloads(r, 40, 300)
	ps[3] = make([]byte, 1200)
	for i := range ps[3] {
		ps[3][i] = byte(r.Uint32())
	}
	// A header in record 3's payload at every 16 bytes past 1000, 2000...
	// (the payload lies at starts[3]+12 on).
	for at := int64(0); at+formats.HeaderLen <= 1200; at += 16 {
		copy(ps[3][at:], fakeHeader(int(at%200)))
	}
	data, starts := blocktest.Frames(t, ps)
	if starts[3] > 1000 || starts[4] < 1100 {
		t.Fatalf("record 3 spans [%d, %d), want it across offset 1000", starts[3], starts[4])
	}
	root := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord"), data)
	for _, bs := range []int64{500, 1000} {
		full := build(t, root, index.Options{BlockSize: bs})
		probed := build(t, root, index.Options{BlockSize: bs, Probe: true})
		compareIndexes(t, full, probed)
	}
}

// A payload made of whole TFRecord frames fools the probe, which takes an
// embedded frame for a record start. The blocks cut there do not tile:
// their loads fail with EIO and a message that says to index in full, and
// never serve the record in pieces.
func TestProbeFooledByEmbeddedFramesGivesEIOWhenTheBlockIsLoaded(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	inner := make([]byte, 50)
	for i := range inner {
		inner[i] = byte(r.Uint32())
	}
	for range 3 {
		inner = formats.AppendFrame(inner, blocktest.RandomPayloads(r, 1, 100)[0])
	}
	ps := append([][]byte{inner}, blocktest.RandomPayloads(r, 20, 100)...)
	data, starts := blocktest.Frames(t, ps)
	root := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord"), data)
	const bs = 30 // a multiple in the payload's first 50 bytes, before the embedded frames
	full := build(t, root, index.Options{BlockSize: bs})
	probed := build(t, root, index.Options{BlockSize: bs, Probe: true})
	if probed.Blocks[0].Len == full.Blocks[0].Len {
		t.Fatalf("the probe was not fooled (first block %+v): the test no longer builds its case", probed.Blocks[0])
	}
	var logs bytes.Buffer
	l := NewLoader(probed, LoaderOptions{MaxMemory: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	b, err := l.Get(t.Context(), blockUnit(0))
	if err == nil {
		l.Release(b)
		t.Fatalf("block 0 (%+v), cut inside record 0 [0, %d), loaded", probed.Blocks[0], starts[1])
	}
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "corgifs index {index} full") {
		t.Fatalf("load of a block cut inside a record: %v; want EIO saying to run corgifs index {index} full", err)
	}
	if !strings.Contains(logs.String(), "corgifs index {index} full") {
		t.Fatalf("no log line says to index in full:\n%s", logs.String())
	}
	// The block that ends the record, after the embedded frames, fails too.
	last := slices.IndexFunc(probed.Blocks, func(b index.Block) bool { return b.Offset+b.Len == starts[1] })
	if _, err := l.Get(t.Context(), blockUnit(int32(last))); !errors.Is(err, syscall.EIO) {
		t.Fatalf("load of block %d (%+v), which ends record 0: %v, want EIO", last, probed.Blocks[last], err)
	}
}

// A probed index is kept in a sidecar of its own, beside the full one;
// when one file changes, only that file is probed again (the log names
// it), and the index equals a new probe of the changed source.
func TestProbedSidecarReprobesOnlyTheChangedFile(t *testing.T) {
	root, files := blocktest.Dataset(t, 31, 3, 200, 1000)
	cache := t.TempDir()
	o := index.Options{BlockSize: 4096, CacheDir: cache, Probe: true}
	ix1, fromCache, _ := openLogged(t, root, o)
	if fromCache || !ix1.Probed {
		t.Fatalf("first Open: from cache %v, probed %v", fromCache, ix1.Probed)
	}
	full := o
	full.Probe = false
	if _, fromCache, _ := openLogged(t, root, full); fromCache {
		t.Fatal("a full index came from the probed index's sidecar")
	}
	if n := len(sidecars(t, cache)); n != 2 {
		t.Fatalf("%d sidecars for a probed and a full index, want 2", n)
	}
	ix2, fromCache, log := openLogged(t, root, o)
	if !fromCache || !reflect.DeepEqual(ix1, ix2) {
		t.Fatalf("second Open: from cache %v, equal %v; log:\n%s", fromCache, reflect.DeepEqual(ix1, ix2), log)
	}
	// f1 gets new records of another size.
	r := rand.New(rand.NewPCG(32, 33))
	blocktest.WriteRecords(t, root, "f1.tfrecord", blocktest.RandomPayloads(r, 150, 3000))
	blocktest.SetMtime(t, files[1].Path, 1e18)
	ix3, fromCache, log := openLogged(t, root, o)
	if fromCache {
		t.Fatal("Open after a change came from the cache")
	}
	if !strings.Contains(log, "probing it again, alone") || !strings.Contains(log, "f1.tfrecord") || strings.Contains(log, "f0.tfrecord") || strings.Contains(log, "f2.tfrecord") {
		t.Fatalf("the log does not name f1 alone as probed again:\n%s", log)
	}
	fresh := build(t, root, index.Options{BlockSize: 4096, Probe: true})
	compareIndexes(t, build(t, root, index.Options{BlockSize: 4096}), ix3)
	if !slices.Equal(ix3.Blocks, fresh.Blocks) || ix3.Bytes != fresh.Bytes {
		t.Fatalf("re-probed index differs from a new probe:\n%v\n%v", ix3.Blocks, fresh.Blocks)
	}
	if ix4, fromCache, _ := openLogged(t, root, o); !fromCache || !slices.Equal(ix4.Blocks, fresh.Blocks) {
		t.Fatalf("the re-probed index was not saved: from cache %v", fromCache)
	}
}

// csvProbeFiles returns CSV files (header id,text,tag) for the probe
// tests: quoted.csv, whose every row has a quoted field with newlines
// and "" escapes; plain.csv, 1.5 MiB without a quote; and long.csv,
// whose quoted rows surround one quoted field of 1.6 MiB of plain lines.
func csvProbeFiles() map[string][]byte {
	const head = "id,text,tag\n"
	quoted := []byte(head)
	for i := 0; len(quoted) < 600<<10; i++ {
		quoted = fmt.Appendf(quoted, "%d,\"row %d\nsecond line, with \"\"quotes\"\"\n%s\",t%d\r\n", i, i, strings.Repeat("x", i%97), i%5)
	}
	plain := []byte(head)
	for i := 0; len(plain) < 1536<<10; i++ {
		plain = fmt.Appendf(plain, "%d,plain row %d,t\n", i, i)
	}
	long := []byte(head)
	for i := range 4000 {
		long = fmt.Appendf(long, "%d,\"q\n%d\",t\n", i, i)
	}
	long = append(long, "4000,\""...)
	for i := 0; i < 1600<<10; i += 16 {
		long = fmt.Appendf(long, "long line %05d\n", i%100000)
	}
	long = append(long, "\",t\n"...)
	for i := range 2000 {
		long = fmt.Appendf(long, "%d,\"q\n%d\",t\n", 5000+i, i)
	}
	return map[string][]byte{"quoted.csv": quoted, "plain.csv": plain, "long.csv": long}
}

// A probed CSV index cuts the blocks of a full index. Where a window of
// the probe holds quoted fields it settles the quoting and the file is
// probed, cuts next to quoted newlines included (where the next newline
// is not a row start); where a window holds no quote (plain rows, or
// inside one long quoted field) the probe cannot be sure, and that file
// alone is scanned whole, said in the log. A dataset of such files only
// gets a full index.
func TestProbedCSVIndexScansWholeOnlyTheFilesWhoseQuotingIsUncertain(t *testing.T) {
	files := csvProbeFiles()
	root := t.TempDir()
	for name, data := range files {
		blocktest.WriteBytes(t, filepath.Join(root, name), data)
	}
	const bs = 256 << 10
	f := formats.CSV{Header: true}
	var logs bytes.Buffer
	full := build(t, root, index.Options{BlockSize: bs, Format: f})
	probed := build(t, root, index.Options{BlockSize: bs, Format: f, Probe: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if !probed.Probed {
		t.Fatal("not a probed index")
	}
	compareIndexes(t, full, probed)
	for _, b := range probed.Blocks {
		name := probed.Files[b.File].Path
		if probedFile := name == "quoted.csv"; probedFile != (b.Records == 0) {
			t.Fatalf("block %+v of %s has %d records known; want the counts of plain.csv and long.csv (scanned whole) and not of quoted.csv (probed)", b, name, b.Records)
		}
	}
	for _, name := range []string{"plain.csv", "long.csv"} {
		if !slices.ContainsFunc(strings.Split(logs.String(), "\n"), func(l string) bool {
			return strings.Contains(l, "level=DEBUG") && strings.Contains(l, "scanning the whole file") && strings.Contains(l, name)
		}) {
			t.Fatalf("the log does not say %s was scanned whole:\n%s", name, logs.String())
		}
	}
	if strings.Contains(logs.String(), "quoted.csv") {
		t.Fatalf("the log names quoted.csv:\n%s", logs.String())
	}
	// The cuts of quoted.csv are not those of the next newline.
	data := files["quoted.csv"]
	notNewline := 0
	for m := int64(bs); m < int64(len(data)); m += bs {
		next := m + int64(bytes.IndexByte(data[m-1:], '\n'))
		if !slices.ContainsFunc(probed.Blocks, func(b index.Block) bool { return probed.Files[b.File].Path == "quoted.csv" && b.Offset == next }) {
			notNewline++
		}
	}
	t.Logf("%d cuts of quoted.csv are past the next newline; log:\n%s", notNewline, logs.String())
	if notNewline == 0 {
		t.Fatal("every multiple of the block size in quoted.csv is cut at the next newline: the test does not put quoted newlines near the cuts")
	}
	// Loaded, the blocks of the mixed index hold the full index's records.
	lf := NewLoader(full, LoaderOptions{MaxMemory: 64 << 20})
	lp := NewLoader(probed, LoaderOptions{MaxMemory: 64 << 20})
	for id := range full.Blocks {
		bf, err := lf.Get(t.Context(), blockUnit(int32(id)))
		if err != nil {
			t.Fatal(err)
		}
		bp, err := lp.Get(t.Context(), blockUnit(int32(id)))
		if err != nil {
			t.Fatalf("probed index, block %d: %v", id, err)
		}
		if got, want := records(bp), records(bf); !slices.Equal(got, want) {
			t.Fatalf("block %d: the probed index loads %d records, the full one %d", id, len(got), len(want))
		}
		lf.Release(bf)
		lp.Release(bp)
	}

	// plain.csv alone: every file scanned whole is a full index.
	only := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(only, "plain.csv"), files["plain.csv"])
	full = build(t, only, index.Options{BlockSize: bs, Format: f})
	probed = build(t, only, index.Options{BlockSize: bs, Format: f, Probe: true})
	if probed.Probed || !slices.Equal(probed.Frames, full.Frames) || !slices.Equal(probed.Blocks, full.Blocks) {
		t.Fatalf("plain.csv alone, probed: Probed %v, %d frames, blocks %v; want the full index's %d frames and blocks %v", probed.Probed, len(probed.Frames), probed.Blocks, len(full.Frames), full.Blocks)
	}
}

// A probed index whose CSV file changed probes that file again, alone,
// and when the new file's quoting leaves a probe uncertain, scans it
// whole: the index cuts the full index's blocks, is saved, and loads
// back from its sidecar as it was.
func TestProbedSidecarScansWholeAChangedCSVFileWhoseQuotingIsUncertain(t *testing.T) {
	files := csvProbeFiles()
	root := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(root, "a.csv"), files["quoted.csv"])
	blocktest.WriteBytes(t, filepath.Join(root, "b.csv"), files["quoted.csv"][:300<<10])
	const bs = 256 << 10
	o := index.Options{BlockSize: bs, Format: formats.CSV{Header: true}, CacheDir: t.TempDir(), Probe: true}
	if ix1, fromCache, log := openLogged(t, root, o); fromCache || !ix1.Probed || strings.Contains(log, "scanning the whole file") {
		t.Fatalf("first Open: from cache %v, probed %v; log:\n%s", fromCache, ix1.Probed, log)
	}
	blocktest.WriteBytes(t, filepath.Join(root, "b.csv"), files["plain.csv"])
	blocktest.SetMtime(t, filepath.Join(root, "b.csv"), 1e18)
	ix2, fromCache, log := openLogged(t, root, o)
	if fromCache || !ix2.Probed || !strings.Contains(log, "probing it again, alone") {
		t.Fatalf("Open after b.csv changed: from cache %v, probed %v; log:\n%s", fromCache, ix2.Probed, log)
	}
	compareIndexes(t, build(t, root, index.Options{BlockSize: bs, Format: o.Format}), ix2)
	for _, b := range ix2.Blocks {
		if scanned := ix2.Files[b.File].Path == "b.csv"; scanned != (b.Records > 0) {
			t.Fatalf("block %+v of %s: %d records known; want b.csv scanned whole and a.csv probed", b, ix2.Files[b.File].Path, b.Records)
		}
	}
	if ix3, fromCache, log := openLogged(t, root, o); !fromCache || !reflect.DeepEqual(ix2.Blocks, ix3.Blocks) {
		t.Fatalf("the re-probed index was not saved or loads back otherwise: from cache %v; log:\n%s", fromCache, log)
	}
}
