package tests

// The defaults of block size and buffer (issue 23): one rule (package
// sizing), applied once before indexing, the same for mount, order and
// validate, and a buffer that mixes the labels of sorted data.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/sizing"
)

// TestFirstMountOfASmallDatasetReadsEachSourceByteOnce mounts a small
// bucket for the first time with a full index and no --block-size: before
// any part is read the mount must have fetched each source byte once
// (counted in stats.json's get_bytes), where the block size rule used to
// index at 8 MiB and then again at the lowered size.
func TestFirstMountOfASmallDatasetReadsEachSourceByteOnce(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 20000, 16, 4, 4, "clustered")
	s.upload("data", "once", src)
	var total int64
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	m := startMount(t, "s3://data/once", "--s3-endpoint", s.endpoint, "--index", "full", "--seed", "1", "--cache-dir", t.TempDir())
	b, err := os.ReadFile(api.StatsPath(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Source struct {
			GETBytes int64 `json:"get_bytes"`
		} `json:"source"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("stats.json: %v\n%s", err, b)
	}
	// Each byte once, and a few first bytes of each file again (the
	// sniffs of its format and compression: 24 bytes here); an index at
	// another block size would read every byte twice.
	if extra := st.Source.GETBytes - total; extra < 0 || extra > int64(len(ents))*64 {
		t.Fatalf("the first mount fetched %d bytes of a %d-byte source (%d files) before any read: want each byte once\n%s", st.Source.GETBytes, total, len(ents), m.log)
	}
	log := m.log.String()
	if n := strings.Count(log, `msg="index ready"`); n != 1 {
		t.Fatalf("%d \"index ready\" lines, want 1:\n%s", n, log)
	}
	c := readSizing(t, m.dir)
	if c.Sizing == nil || c.Sizing.BlockSizeGiven || c.Sizing.Reason == "" || c.BlockSize != sizing.ObjectStoreFloor || c.Buffer != "100%" {
		t.Fatalf("config.json: block_size %d, buffer %s, sizing %+v: want the object store's floor, a whole part, and why", c.BlockSize, c.Buffer, c.Sizing)
	}
}

func readSizing(t *testing.T, mnt string) api.Config {
	t.Helper()
	b, err := os.ReadFile(api.ConfigPath(mnt))
	if err != nil {
		t.Fatal(err)
	}
	var c api.Config
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("config.json: %v\n%s", err, b)
	}
	return c
}

// TestOrderWithTheDefaultsMixesTheLabelsOfEveryBuffer lists, through
// corgifs order at the defaults, the records of a dataset of 60,000 records
// sorted by label into 10 classes, and checks the label mix of every
// buffer against the whole dataset's.
//
// The bound: a block holds one class (or two, at a class boundary, which
// only mixes more), so a buffer's label shares are those of B blocks drawn
// at random from the N of the dataset (of the part: parts are random runs
// of the epoch's block permutation). Each share p̂ is hypergeometric with
// standard deviation σ = √(p(1−p)/B) at most; TV = ½Σ|p̂−p| has mean
// ½·C·σ·√(2/π) = 1.197/√B for C = 10, p = 0.1, and standard deviation
// about ½·√(C(1−2/π))·σ = 0.286/√B. The bound is the mean plus 5 standard
// deviations, 2.63/√B: 0.16 at the 256 blocks a buffer the rule aims at.
// A regression to 19 blocks a buffer (TV 0.27, the old default) fails it.
func TestOrderWithTheDefaultsMixesTheLabelsOfEveryBuffer(t *testing.T) {
	src := genSynthetic(t, 60000, 16, 10, 8, "clustered", "--format", "csv")
	files := map[string][]byte{}
	var total int64
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
		total += int64(len(b))
	}
	for _, tc := range []struct {
		name      string
		parts     int
		maxMemory int64
	}{
		// Each of 8 parts is one buffer: an exact shuffle of its blocks.
		{"8 parts", 8, 1 << 30},
		// Too little memory for the whole dataset: buffers of 256 blocks.
		{"1 part, 8 MiB of memory", 1, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sizing.Choose(sizing.Input{DatasetBytes: total, Parts: tc.parts, MaxMemory: tc.maxMemory})
			part := (total + int64(tc.parts) - 1) / int64(tc.parts)
			// A part is cut into nbuf buffers of equal bytes, so of
			// blocks the part's share each.
			nbuf := max(1, (part+c.BufferBytes-1)/c.BufferBytes)
			blocks := part / c.BlockSize / nbuf
			bound := 2.63 / math.Sqrt(float64(blocks))
			t.Logf("block %d, buffer at most %d bytes, %d buffers a part of about %d blocks; bound %.3f", c.BlockSize, c.BufferBytes, nbuf, blocks, bound)
			if blocks < sizing.MinBlocks {
				t.Fatalf("the defaults give %d blocks a buffer, fewer than %d", blocks, sizing.MinBlocks)
			}
			var global [10]int
			var parts [][]int
			for i := range tc.parts {
				out := corgifs(t, "order", src, "--seed", "7", "--parts", fmt.Sprint(tc.parts), "--part", fmt.Sprint(i),
					"--max-memory", fmt.Sprint(tc.maxMemory), "--cache-dir", filepath.Join(t.TempDir(), "cache"))
				labels := orderLabels(t, files, out)
				for _, l := range labels {
					global[l]++
				}
				parts = append(parts, labels)
			}
			n := 0
			for _, g := range global {
				n += g
			}
			if n != 60000 {
				t.Fatalf("the parts hold %d records, want 60000", n)
			}
			worst := 0.0
			for i, labels := range parts {
				// Buffers are balanced by bytes, and the records are of
				// nearly one size: nbuf runs of equal length are the
				// buffers, give or take a block at the edges.
				for g := range nbuf {
					lo, hi := len(labels)*int(g)/int(nbuf), len(labels)*int(g+1)/int(nbuf)
					var h [10]int
					for _, l := range labels[lo:hi] {
						h[l]++
					}
					tv := 0.0
					for c := range h {
						tv += math.Abs(float64(h[c])/float64(hi-lo)-float64(global[c])/float64(n)) / 2
					}
					worst = max(worst, tv)
					if tv > bound {
						t.Errorf("part %d, buffer %d: label TV %.3f to the dataset's mix, over the bound %.3f", i, g, tv, bound)
					}
				}
			}
			t.Logf("worst buffer TV %.3f (bound %.3f, expected %.3f)", worst, bound, sizing.ExpectedTV(blocks, total/c.BlockSize, 10))
		})
	}
}

// orderLabels returns the labels of the records order listed: the second
// column of the CSV rows of gen synthetic (id,label,features...).
func orderLabels(t *testing.T, files map[string][]byte, out string) []int {
	t.Helper()
	var labels []int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var name string
		var off, n int64
		if _, err := fmt.Sscan(sc.Text(), &name, &off, &n); err != nil {
			t.Fatalf("order line %q: %v", sc.Text(), err)
		}
		row := files[name][off : off+n]
		f := bytes.SplitN(row, []byte(","), 3)
		var l int
		if _, err := fmt.Sscan(string(f[1]), &l); err != nil || l < 0 || l > 9 {
			t.Fatalf("row %q of %s at %d: no label", row, name, off)
		}
		labels = append(labels, l)
	}
	return labels
}

// TestValidateWithNoFlagsMountsAsAPlainMountDoes runs validate without
// --block-size and --buffer: its mount must have the config.json of a
// plain mount of the same data and flags (the same defaults, chosen for
// the same reason), which its JSON report carries.
func TestValidateWithNoFlagsMountsAsAPlainMountDoes(t *testing.T) {
	fuseOK(t)
	train := genSynthetic(t, 20000, 16, 10, 4, "clustered")
	test := genSynthetic(t, 2000, 16, 10, 1, "shuffled", "--first-id", "20000")
	out := filepath.Join(t.TempDir(), "r.json")
	corgifs(t, "validate", "--data", train, "--test", test, "--strategies", "corgipile", "--epochs", "1", "--seed", "5",
		"--cache-dir", t.TempDir(), "--json", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Runs []struct {
			MountConfig map[string]any `json:"mount_config"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.Runs) != 1 || r.Runs[0].MountConfig == nil {
		t.Fatalf("validate's report has no mount_config (%v):\n%s", err, b)
	}
	m := startMount(t, train, "--strategy", "corgipile", "--seed", "5", "--epochs", "1", "--cache-dir", t.TempDir())
	b, err = os.ReadFile(api.ConfigPath(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	got := r.Runs[0].MountConfig
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("validate's mount config.json differs from a plain mount's:\nvalidate: %s\nmount: %s", g, w)
	}
	if s, _ := want["sizing"].(map[string]any); s == nil || s["block_size_given"] != false || s["buffer_given"] != false {
		t.Fatalf("config.json sizing %v: want both chosen", want["sizing"])
	}
}

// TestValidateReportsTheWarningsOfItsMountsViaMountAndDirect gives
// validate a buffer of too few blocks: the mount's warning must reach
// validate's stderr and JSON (the mount's own log is deleted with
// validate's work directory), and an in-process run (--via direct) must
// report the same warnings in its JSON as its mount does (issue 23 item 2).
func TestValidateReportsTheWarningsOfItsMountsViaMountAndDirect(t *testing.T) {
	fuseOK(t)
	train := genSynthetic(t, 20000, 16, 10, 4, "clustered")
	test := genSynthetic(t, 2000, 16, 10, 1, "shuffled", "--first-id", "20000")
	const warning = "too few blocks per buffer"
	got := map[string][][]string{}
	for _, via := range []string{"mount", "direct"} {
		out := filepath.Join(t.TempDir(), "r.json")
		_, stderr, code := run("validate", "--data", train, "--test", test, "--strategies", "corgipile,window", "--epochs", "1", "--seed", "5",
			"--block-size", "64KiB", "--buffer", "10%", "--cache-dir", t.TempDir(), "--json", out, "--via", via)
		if code != 0 {
			t.Fatalf("validate --via %s exit %d:\n%s", via, code, stderr)
		}
		if !strings.Contains(stderr, warning) || via == "mount" && !strings.Contains(stderr, "mount of corgipile: ") ||
			via == "direct" && !strings.Contains(stderr, "run=corgipile") {
			t.Fatalf("validate --via %s: stderr lacks the run's warning:\n%s", via, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Runs []struct {
				Warnings []string `json:"warnings"`
			} `json:"runs"`
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Runs) != 2 || len(r.Runs[0].Warnings) == 0 || !strings.Contains(r.Runs[0].Warnings[0], warning) {
			t.Fatalf("validate --via %s: the JSON lacks the corgipile mount's warning (%v):\n%s", via, err, b)
		}
		for _, run := range r.Runs {
			got[via] = append(got[via], run.Warnings)
		}
	}
	// window reads records one at a time: its 10% buffer mixes records,
	// so neither its mount nor its in-process run warns.
	if !reflect.DeepEqual(got["mount"], got["direct"]) {
		t.Errorf("the runs' warnings differ:\nvia mount:  %q\nvia direct: %q", got["mount"], got["direct"])
	}
}

// TestValidateDirectAtTheDefaultsTrainsAsItsMounts runs validate without
// --block-size and --buffer through mounts and in-process (--via direct):
// the in-process orders must take the buffer each strategy's mount chose
// (a whole part for corgipile, 5% for window), so every epoch trains alike.
func TestValidateDirectAtTheDefaultsTrainsAsItsMounts(t *testing.T) {
	fuseOK(t)
	train := genSynthetic(t, 20000, 16, 10, 4, "clustered")
	test := genSynthetic(t, 2000, 16, 10, 1, "shuffled", "--first-id", "20000")
	var got [2]report
	for i, via := range []string{"mount", "direct"} {
		got[i] = validateJSON(t, "validate", "--data", train, "--test", test, "--strategies", "corgipile,window,full",
			"--epochs", "2", "--seed", "3", "--workers", "2", "--via", via, "--cache-dir", t.TempDir())
	}
	for r, run := range got[0].Runs {
		for e, ep := range run.Epochs {
			d := got[1].Runs[r].Epochs[e]
			if ep.TestAcc != d.TestAcc || ep.TrainLoss != d.TrainLoss {
				t.Fatalf("%s epoch %d: through mounts test accuracy %v, loss %v; direct %v, %v", run.Strategy, e, ep.TestAcc, ep.TrainLoss, d.TestAcc, d.TrainLoss)
			}
		}
	}
}

// TestTinyDatasetAtTheDefaultsIsServedInBlocksOfTheLocalFloor mounts two
// datasets far under 256 blocks of the floor a part, without --block-size:
// one of records smaller than the floor (several a block) and one of
// records larger (a block each: a block is cut only at a record boundary).
// Blocks of 512 bytes are smaller than a page and than many records, so
// the test reads every part of two epochs through the mount and checks
// that each record is served once, CRCs intact, that parts differ by at
// most about a block of bytes (few, coarse blocks a part made the
// lock-step tail of an epoch lean to one class, VALIDATION.md), and that
// no block was read with O_DIRECT, which needs whole pages.
func TestTinyDatasetAtTheDefaultsIsServedInBlocksOfTheLocalFloor(t *testing.T) {
	for _, tc := range []struct {
		name              string
		records, features int
	}{
		{"records under the floor", 600, 16},
		{"records over the floor", 120, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := genSynthetic(t, tc.records, tc.features, 4, 4, "clustered")
			want := sourceRecords(t, src)
			var maxRec int64
			names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
			for _, n := range names {
				b, err := os.ReadFile(n)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range frames(t, b) {
					maxRec = max(maxRec, int64(len(r))+16)
				}
			}
			const k = 4
			m := startMount(t, src, "--seed", "3", "--parts", fmt.Sprint(k), "--cache-dir", t.TempDir())
			c := readSizing(t, m.dir)
			if c.BlockSize != sizing.LocalFloor || c.Sizing == nil || c.Sizing.BlockSizeGiven || !strings.Contains(c.Sizing.Reason, "the floor of a local source") {
				t.Fatalf("config.json block_size %d, sizing %+v: want the local floor %d, chosen, and why", c.BlockSize, c.Sizing, sizing.LocalFloor)
			}
			total, blocks := c.Dataset.Bytes, int64(c.Dataset.Blocks)
			if maxRec > sizing.LocalFloor && blocks != int64(len(want)) {
				t.Fatalf("%d blocks of %d records over %d bytes: want a block a record", blocks, len(want), sizing.LocalFloor)
			}
			if maxRec < sizing.LocalFloor && blocks < total/sizing.LocalFloor-4 {
				t.Fatalf("%d blocks for %d bytes: want about one every %d bytes", blocks, total, sizing.LocalFloor)
			}
			// A block is at most a floor of bytes plus the record that
			// crosses its end.
			block := sizing.LocalFloor + maxRec
			for e := range 2 {
				var got [][32]byte
				for i := range k {
					b := m.read(e, i, k)
					if d := int64(k)*int64(len(b)) - total; d > k*block || -d > k*block {
						t.Errorf("epoch %d part %d of %d holds %d bytes, want %d ± %d (bytes/K ± a block)", e, i, k, len(b), total/k, block)
					}
					got = append(got, hashes(frames(t, b))...)
				}
				if !reflect.DeepEqual(sortedHashes(got), sortedHashes(want)) {
					t.Fatalf("epoch %d: the parts hold %d records, not each of the source's %d once", e, len(got), len(want))
				}
			}
			if s := m.stats(); s.DirectBytesRead != 0 || s.BlocksRead == 0 {
				t.Fatalf("stats: %d blocks read, %d bytes with O_DIRECT: want blocks under a page read through the page cache", s.BlocksRead, s.DirectBytesRead)
			}
		})
	}
}
