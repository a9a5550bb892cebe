package blockcache

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// nestedTFRecord returns a TFRecord file whose records are, one in three,
// whole TFRecord streams of a dozen records of their own (an archive of
// shards), the others plain payloads; no inner record equals an outer one.
func nestedTFRecord(t testing.TB, r *rand.Rand, n int) []byte {
	var ps [][]byte
	for i := range n {
		if i%3 != 1 {
			ps = append(ps, fmt.Appendf(nil, "outer %d %s", i, strings.Repeat("o", r.IntN(300))))
			continue
		}
		var inner [][]byte
		for k := range 12 {
			inner = append(inner, fmt.Appendf(nil, "inner %d.%d %s", i, k, strings.Repeat("i", 20+r.IntN(80))))
		}
		data, _ := blocktest.Frames(t, inner)
		ps = append(ps, data)
	}
	data, _ := blocktest.Frames(t, ps)
	return data
}

// nestedTar returns a WebDataset shard whose samples carry, one in three, a
// member that is itself a WebDataset shard (with its end-of-archive marker).
func nestedTar(t testing.TB, n int) []byte {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for i := range n {
		key := fmt.Sprintf("outer%04d", i)
		data := []byte(strings.Repeat("x", 100+i))
		ext := ".bin"
		if i%3 == 1 {
			data, ext = blocktest.WDSBytes(t, fmt.Sprintf("in%d_", i), 8), ".tar"
		}
		for _, m := range []struct {
			ext  string
			data []byte
		}{{".cls", []byte(fmt.Sprint(i % 10))}, {ext, data}} {
			if err := w.WriteHeader(&tar.Header{Name: key + m.ext, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			w.Write(m.data)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// nestedCase is a file of one format whose payloads embed valid streams of
// the same format, with block sizes that put probes inside them.
type nestedCase struct {
	format formats.Format
	name   string
	data   []byte
	sizes  []int64
}

func nestedCases(t testing.TB) []nestedCase {
	r := rand.New(rand.NewPCG(31, 32))
	var jl, csv []byte
	csv = []byte("id,text\n")
	for i := range 80 {
		// A JSONL stream inside a JSON string: its newlines are escaped.
		inner := fmt.Sprintf("{\"n\": %d}\n{\"m\": \"%s\"}\n", i, strings.Repeat("j", i))
		s, _ := json.Marshal(map[string]any{"i": i, "inner": inner})
		jl = append(append(jl, s...), '\n')
		// A CSV stream inside a quoted field: raw newlines, quotes doubled.
		csv = fmt.Appendf(csv, "%d,\"%d,\"\"a\nb\"\"\n%d,plain\n\"\n", i, i, i)
	}
	return []nestedCase{
		{formats.TFRecord{}, "a.tfrecord", nestedTFRecord(t, r, 60), []int64{100, 333, 1000}},
		{formats.WDS{}, "a.tar", nestedTar(t, 30), []int64{3000, 5000, 8192}},
		{formats.JSONL{}, "a.jsonl", jl, []int64{50, 200}},
		{formats.CSV{}, "a.csv", csv, []int64{50, 200}},
	}
}

// The records a full index finds in the file, as the loader serves them.
func fullRecords(t *testing.T, ix *index.Index) map[string]int {
	l := NewLoader(ix, LoaderOptions{MaxMemory: 64 << 20})
	want := map[string]int{}
	for id := range ix.Blocks {
		b, err := l.Get(t.Context(), blockUnit(int32(id)))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range records(b) {
			want[s]++
		}
		l.Release(b)
	}
	return want
}

// A file whose payloads embed valid streams of its own format, probed with
// blocks smaller than a record, in any order of loads: every block either
// loads exactly the records a full index puts in it, or fails with EIO;
// never a record that is not in the source. The probe was fooled (some
// cuts differ from the full index's) for TFRecord and tar, and every
// block of the line formats and CSV, whose probes are exact, loads.
func TestProbedBoundaryIsServedOnlyOnceTheRecordChainProvesIt(t *testing.T) {
	for _, c := range nestedCases(t) {
		root := t.TempDir()
		blocktest.WriteBytes(t, filepath.Join(root, c.name), c.data)
		for _, bs := range c.sizes {
			t.Run(fmt.Sprintf("%s/BlockSize=%d", c.format.Name(), bs), func(t *testing.T) {
				full := build(t, root, index.Options{BlockSize: bs, Format: c.format})
				probed := build(t, root, index.Options{BlockSize: bs, Format: c.format, Probe: true})
				want := fullRecords(t, full)
				_, chained := c.format.(formats.Chainer)
				fooled := len(full.Blocks) != len(probed.Blocks) || slices.ContainsFunc(probed.Blocks, func(b index.Block) bool {
					return !slices.ContainsFunc(full.Blocks, func(f index.Block) bool { return f.Offset == b.Offset })
				})
				if chained && !fooled {
					t.Fatalf("the probe was not fooled at block size %d: the test no longer builds its case", bs)
				}
				if !chained {
					compareIndexes(t, full, probed)
				}
				for _, ahead := range []bool{false, true} {
					for _, order := range []string{"forward", "backward", "random"} {
						if ahead {
							order += ", gaps read ahead"
						}
						ids := make([]int32, len(probed.Blocks))
						for i := range ids {
							ids[i] = int32(i)
						}
						switch strings.TrimSuffix(order, ", gaps read ahead") {
						case "backward":
							slices.Reverse(ids)
						case "random":
							rand.New(rand.NewPCG(uint64(bs), 7)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
						}
						var wrong []string
						l := NewLoader(probed, LoaderOptions{MaxMemory: 64 << 20, OnProbeWrong: func(f index.File, reason string) { wrong = append(wrong, f.Path) }})
						readAhead(l, ahead)
						failed := 0
						for _, id := range ids {
							b, err := l.Get(t.Context(), blockUnit(id))
							if err != nil {
								if !errors.Is(err, syscall.EIO) {
									t.Fatalf("%s: block %d %+v: %v, want EIO", order, id, probed.Blocks[id], err)
								}
								if !chained {
									t.Fatalf("%s: block %d %+v of a format whose probe is exact: %v", order, id, probed.Blocks[id], err)
								}
								failed++
								continue
							}
							for _, s := range records(b) {
								if want[s] == 0 {
									t.Fatalf("%s: block %d %+v served a record that is not in the source: %q", order, id, probed.Blocks[id], s)
								}
							}
							// And exactly the full index's records of its bytes.
							for _, f := range full.Blocks {
								if f.Offset == probed.Blocks[id].Offset && f.Len != probed.Blocks[id].Len {
									t.Fatalf("%s: block %d %+v served, the full index's block there is %+v", order, id, probed.Blocks[id], f)
								}
							}
							l.Release(b)
						}
						if chained && (failed == 0 || !slices.Equal(wrong, []string{c.name})) {
							t.Fatalf("%s: %d blocks failed, files reported wrong %q; want some and %q once", order, failed, wrong, c.name)
						}
					}
				}
			})
		}
	}
}

// A block served by a probed index is one whose bytes start and end where
// a full index's blocks do: checked above; here the unproven case of
// normal data, loaded backwards (each load walks the chain further), loads
// every block, and a TFRecord walk over large records reads little.
func TestRecordChainProvesEveryCutOfNormalDataInAnyOrder(t *testing.T) {
	for _, c := range probeCases(t) {
		if _, ok := c.Format.(formats.Chainer); !ok {
			continue
		}
		root := c.Write(t)
		for _, ahead := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ReadAhead=%v", c.Format.Name(), ahead), func(t *testing.T) {
				o := index.Options{BlockSize: 3000, Format: c.Format}
				full := build(t, root, o)
				o.Probe = true
				probed := build(t, root, o)
				lf := NewLoader(full, LoaderOptions{MaxMemory: 64 << 20})
				lp := NewLoader(probed, LoaderOptions{MaxMemory: 64 << 20, OnProbeWrong: func(f index.File, reason string) { t.Errorf("file %s reported wrong: %s", f.Path, reason) }})
				readAhead(lp, ahead)
				for id := len(full.Blocks) - 1; id >= 0; id-- {
					bf, err := lf.Get(t.Context(), blockUnit(int32(id)))
					if err != nil {
						t.Fatal(err)
					}
					bp, err := lp.Get(t.Context(), blockUnit(int32(id)))
					if err != nil {
						t.Fatalf("block %d: %v", id, err)
					}
					if !slices.Equal(records(bp), records(bf)) {
						t.Fatalf("block %d: probed index loads other records", id)
					}
					lf.Release(bf)
					lp.Release(bp)
				}
				if ahead && lp.proof.ahead == nil {
					t.Fatal("no read-ahead")
				}
			})
		}
	}
}

// readAhead turns the reading ahead of gaps (chain_ahead.go), which a
// loader of a remote source does, on or off for a loader of local files,
// with the blocks read kept for their loads (walked.go) as a remote
// source's loader keeps them.
func readAhead(l *Loader, on bool) {
	if l.proof == nil {
		return
	}
	l.proof.ahead = nil
	if on {
		l.proof.ahead = newAheadReads()
		l.proof.ahead.keep = l
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r *bytes.Reader
	n int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

// The TFRecord chain walk reads headers, not payloads: over records of
// 1 MiB it reads a few KiB a record; over small ones it reads the file
// once. It meets exactly the frame starts.
func TestTFRecordChainWalkReadsHeadersOnly(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	var ps [][]byte
	for range 40 {
		ps = append(ps, make([]byte, 1<<20+r.IntN(1000)))
	}
	data, starts := blocktest.Frames(t, ps)
	cr := &countingReader{r: bytes.NewReader(data)}
	h := formats.Head{Start: 0, End: int64(len(data))}
	at := int64(0)
	for i := 1; i < len(starts); i++ {
		got, err := formats.TFRecord{}.ChainFrom(cr, h, at, starts[i-1]+1)
		if err != nil || got != starts[i] {
			t.Fatalf("chain from %d past %d: %d, %v; want frame %d at %d", at, starts[i-1]+1, got, err, i, starts[i])
		}
		at = got
	}
	if end, err := (formats.TFRecord{}).ChainFrom(cr, h, at, h.End); err != nil || end != h.End {
		t.Fatalf("chain to the end: %d, %v; want %d", end, err, h.End)
	}
	if per := cr.n / int64(len(ps)); per > 16<<10 {
		t.Fatalf("the walk read %d bytes a 1 MiB record", per)
	}
	t.Logf("chain walk over %d records of 1 MiB read %d KiB", len(ps), cr.n>>10)
}

// After a load proves a probe wrong, the loader's OnProbeWrong (the CLI's
// MarkProbeWrong) marks the sidecar stale and lists the file: the next
// Open scans that file whole, so its blocks are a full index's and every
// one loads the full index's records; a later change of the file probes
// it again.
func TestFileWhoseProbeWasProvedWrongIsScannedWholeByTheNextOpen(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	root := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord"), nestedTFRecord(t, r, 60))
	blocktest.WriteRecords(t, root, "b.tfrecord", blocktest.RandomPayloads(r, 200, 300))
	var logs bytes.Buffer
	o := index.Options{BlockSize: 333, Probe: true, CacheDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ix, _, err := index.Open(t.Context(), blocktest.Dir(t, root, false), o)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(ix, LoaderOptions{MaxMemory: 64 << 20, OnProbeWrong: func(f index.File, reason string) {
		if err := index.MarkProbeWrong(blocktest.Dir(t, root, false), o, f, reason); err != nil {
			t.Error(err)
		}
	}})
	failed := 0
	for id := range ix.Blocks {
		if b, err := l.Get(t.Context(), blockUnit(int32(id))); err != nil {
			failed++
		} else {
			l.Release(b)
		}
	}
	if failed == 0 {
		t.Fatal("no block failed: the probe was not fooled")
	}
	ix2, fromCache, err := index.Open(t.Context(), blocktest.Dir(t, root, false), o)
	if err != nil {
		t.Fatal(err)
	}
	if fromCache || !ix2.Probed {
		t.Fatalf("second Open: from cache %v, probed %v; want a rebuilt probed index", fromCache, ix2.Probed)
	}
	if !strings.Contains(logs.String(), "a load proved the probe of this file wrong") || !strings.Contains(logs.String(), "file="+filepath.Join(root, "a.tfrecord")) {
		t.Fatalf("no log line names the file scanned whole:\n%s", logs.String())
	}
	full := build(t, root, index.Options{BlockSize: 333})
	want := fullRecords(t, full)
	l2 := NewLoader(ix2, LoaderOptions{MaxMemory: 64 << 20})
	got := map[string]int{}
	for id, b := range ix2.Blocks {
		if ix2.Files[b.File].Path == "a.tfrecord" && b.Records == 0 {
			t.Fatalf("block %d of a.tfrecord %+v has no record count: probed, not scanned whole", id, b)
		}
		buf, err := l2.Get(t.Context(), blockUnit(int32(id)))
		if err != nil {
			t.Fatalf("block %d %+v: %v", id, b, err)
		}
		for _, s := range records(buf) {
			got[s]++
		}
		l2.Release(buf)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the rebuilt index serves %d distinct records, the full index %d", len(got), len(want))
	}
	// A third Open keeps the rebuilt sidecar.
	if _, fromCache, err := index.Open(t.Context(), blocktest.Dir(t, root, false), o); err != nil || !fromCache {
		t.Fatalf("third Open: from cache %v, %v", fromCache, err)
	}
}

// A file whose cuts a loader proved is kept in the ProofLog: a later
// loader of the same index (a remount, its blocks perhaps in the disk
// cache) serves it without walking again, while a changed cut list (another
// block size) is walked.
func TestProvenFilesAreNotWalkedAgainByALaterLoader(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	root := t.TempDir()
	blocktest.WriteRecords(t, root, "a.tfrecord", blocktest.RandomPayloads(r, 300, 300))
	o := index.Options{BlockSize: 1000, Probe: true, CacheDir: t.TempDir()}
	load := func(ix *index.Index) Stats {
		pl, err := index.OpenProofLog(blocktest.Dir(t, root, false), o)
		if err != nil {
			t.Fatal(err)
		}
		l := NewLoader(ix, LoaderOptions{MaxMemory: 64 << 20, Proofs: pl})
		for id := len(ix.Blocks) - 1; id >= 0; id-- {
			b, err := l.Get(t.Context(), blockUnit(int32(id)))
			if err != nil {
				t.Fatalf("block %d: %v", id, err)
			}
			l.Release(b)
		}
		if err := pl.Close(); err != nil {
			t.Fatal(err)
		}
		return l.Stats()
	}
	ix := build(t, root, o)
	if s := load(ix); s.ProofReads == 0 || s.ProofBytes == 0 {
		t.Fatalf("the first loader walked nothing: %+v", s)
	}
	if s := load(ix); s.ProofReads != 0 {
		t.Fatalf("the second loader walked again: %d reads, %d bytes", s.ProofReads, s.ProofBytes)
	}
	o.BlockSize = 700
	if s := load(build(t, root, o)); s.ProofReads == 0 {
		t.Fatal("an index with other cuts was not walked")
	}
}

// A damaged length in the middle of a file breaks its record chain: the
// blocks before the damage load, and every block from the damaged one on
// fails with EIO saying the chain is broken (no boundary past it can be
// proven), and the file is reported once to be scanned whole.
func TestBrokenRecordChainFailsEveryLaterBlockOfAProbedIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	data, starts := blocktest.Frames(t, blocktest.RandomPayloads(r, 200, 300))
	bad := starts[100]
	data[bad+8] ^= 0xff // the length CRC of record 100
	root := t.TempDir()
	blocktest.WriteBytes(t, filepath.Join(root, "a.tfrecord"), data)
	probed := build(t, root, index.Options{BlockSize: 1000, Probe: true})
	var wrong []string
	l := NewLoader(probed, LoaderOptions{MaxMemory: 64 << 20, OnProbeWrong: func(f index.File, reason string) { wrong = append(wrong, reason) }})
	for id := len(probed.Blocks) - 1; id >= 0; id-- {
		b := probed.Blocks[id]
		buf, err := l.Get(t.Context(), blockUnit(int32(id)))
		if b.Offset+b.Len <= bad {
			if err != nil {
				t.Fatalf("block %d %+v, before the damage at %d: %v", id, b, bad, err)
			}
			l.Release(buf)
			continue
		}
		if !errors.Is(err, syscall.EIO) || b.Offset > bad && !strings.Contains(err.Error(), "record chain from its start is broken") {
			t.Fatalf("block %d %+v, past the damage at %d: %v; want EIO saying the chain is broken", id, b, bad, err)
		}
	}
	if len(wrong) != 1 {
		t.Fatalf("the file was reported %d times, want once: %q", len(wrong), wrong)
	}
}
