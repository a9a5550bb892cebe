package tune

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/index"
)

// blocksIndex is an index of n blocks of size bytes, each of per records.
func blocksIndex(n int, size int64, per int32) *index.Index {
	ix := &index.Index{Root: "/nonexistent", BlockSize: size, Format: "tfrecord",
		Files: []index.File{{Path: "a", Size: int64(n) * size, Records: int64(n) * int64(per)}}}
	for i := range n {
		ix.Blocks = append(ix.Blocks, index.Block{Records: per, Offset: int64(i) * size, Len: size})
	}
	ix.Bytes, ix.Records = int64(n)*size, int64(n)*int64(per)
	return ix
}

// sortedReport is the data report of n blocks of a source sorted by
// label, classes labels each filling a run of blocks, with clustering hd.
func sortedReport(n, classes int, hd float64) DataReport {
	a := NewAnalysis()
	for b := range n {
		a.StartBlock()
		for range 8 {
			if err := a.Record(int64(b*classes/n), nil); err != nil {
				panic(err)
			}
		}
		a.EndBlock()
	}
	return DataReport{Blocks: n, BlocksInAll: n, HD: hd, Mix: a.Mix(n, 1)}
}

// The buffer advice asks for what its rule needs, and the --buffer it
// prints gives, in the plan a mount makes, buffers of at least those
// blocks (and at least MinBufferBlocks), of a part when there are several.
func TestBufferAdviceGivesBuffersOfTheBlocksItsRuleAsksFor(t *testing.T) {
	cases := []struct {
		name          string
		blocks, parts int
		hd, maxTV     float64
		criterion     string
	}{
		{"random order, the bound", 100, 1, 1, 0, "bound"},
		{"clustered, the bound", 1584, 1, 28, 0, "bound"},
		{"clustered, the mix", 1584, 1, 28, 0.1, "mix"},
		{"clustered, the mix of four parts", 400, 4, 5, 0.1, "mix"},
		{"mildly clustered, the bound of two parts", 600, 2, 1.5, 0, "bound"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ix := blocksIndex(tc.blocks, 32<<10, 38)
			rep := sortedReport(tc.blocks, 4, tc.hd)
			c, err := BufferAdvice(rep, ix, tc.parts, tc.maxTV)
			if err != nil {
				t.Fatal(err)
			}
			if c.Criterion != tc.criterion || c.Of != tc.blocks || c.Part != tc.blocks/tc.parts {
				t.Errorf("criterion %s of %d part %d; want %s of %d part %d", c.Criterion, c.Of, c.Part, tc.criterion, tc.blocks, tc.blocks/tc.parts)
			}
			if c.BoundBlocks != NeededBlocks(tc.hd, c.Part) {
				t.Errorf("bound asks for %d blocks, want NeededBlocks %d", c.BoundBlocks, NeededBlocks(tc.hd, c.Part))
			}
			if tc.criterion == "mix" && (c.Blocks != c.MixBlocks || c.MixTV > tc.maxTV) {
				t.Errorf("mix: %d blocks (mix asks %d), expected TV %g, want at most %g", c.Blocks, c.MixBlocks, c.MixTV, tc.maxTV)
			}
			_, fewest, err := PlannedBuffer(ix, tc.parts, c.Percent)
			if err != nil {
				t.Fatal(err)
			}
			want := min(max(c.Blocks, min(MinBufferBlocks, c.Part)), c.Part)
			if fewest < want {
				t.Errorf("--buffer %g%% plans buffers of %d blocks, want at least %d", c.Percent, fewest, want)
			}
			if wantBytes := int64(float64(ix.Bytes) / float64(tc.parts) * c.Percent / 100); c.Bytes != wantBytes {
				t.Errorf("buffer of %d bytes, want %d", c.Bytes, wantBytes)
			}
			if len(c.At) != 7 {
				t.Fatalf("%d comparison points, want 7", len(c.At))
			}
			for i := 1; i < len(c.At); i++ {
				if c.At[i].Blocks < c.At[i-1].Blocks || c.At[i].MixTV > c.At[i-1].MixTV+0.02 {
					t.Errorf("point %g%% (%d blocks, TV %g) after %g%% (%d blocks, TV %g)", c.At[i].Percent, c.At[i].Blocks, c.At[i].MixTV,
						c.At[i-1].Percent, c.At[i-1].Blocks, c.At[i-1].MixTV)
				}
			}
		})
	}
}

// The mount's own buffer is enough when it is a whole part (an exact
// shuffle), else when it mixes the labels as --mix-tv asks.
func TestDefaultsAdviceSaysWhetherTheMountsOwnBufferIsEnough(t *testing.T) {
	cases := []struct {
		name      string
		blocks    int
		size      int64
		maxMemory int64
		maxTV     float64
		wholePart bool
		enough    bool
	}{
		{"a dataset that fits in memory", 200, 32 << 10, 1 << 30, 0.1, true, true},
		{"a large dataset, loose mix", 1584, 8 << 20, 1 << 30, 0.9, false, true},
		{"a large dataset, strict mix", 1584, 8 << 20, 1 << 30, 0.001, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ix := blocksIndex(tc.blocks, tc.size, 38)
			rep := sortedReport(tc.blocks, 10, 20)
			m := DefaultsAdvice(false, tc.maxMemory, rep, ix, tc.size, 1, tc.maxTV, nil)
			if m.WholePart != tc.wholePart || m.Enough != tc.enough || m.Reason == "" || m.Buffer == "" {
				t.Errorf("%+v: want whole part %v, enough %v, with a reason", m, tc.wholePart, tc.enough)
			}
			if tc.wholePart && m.Blocks != tc.blocks {
				t.Errorf("a whole part of %d blocks, want %d", m.Blocks, tc.blocks)
			}
			if !tc.wholePart && (m.Blocks < 1 || m.Blocks >= tc.blocks) {
				t.Errorf("a buffer of %d blocks of %d", m.Blocks, tc.blocks)
			}
		})
	}
}

// The mount line is one a shell runs as printed: the source quoted when
// it must be, sizes as the flags take them, tune's --max-memory carried
// (the mount's default buffer is chosen within it), and raised when two
// buffers need more than it.
func TestMountLineIsTheCommandToRun(t *testing.T) {
	cases := []struct {
		src   string
		block int64
		parts int
		mem   int64
		buf   *BufferChoice
		want  string
	}{
		{"/data", 32 << 10, 1, 0, nil, "corgifs mount /data MNT --block-size 32KiB"},
		{"s3://b/p", 8 << 20, 1, 0, nil, "corgifs mount s3://b/p MNT --block-size 8MiB"},
		{"/my data", 1 << 20, 4, 0, &BufferChoice{Percent: 8.4, Bytes: 100 << 20}, "corgifs mount '/my data' MNT --block-size 1MiB --parts 4 --buffer 8.4%"},
		{"/it's", 1000, 1, 0, &BufferChoice{Percent: 50, Bytes: 1 << 30}, `corgifs mount '/it'\''s' MNT --block-size 1000 --buffer 50% --max-memory 2304MiB`},
		{"/d", 1500000, 1, 0, nil, "corgifs mount /d MNT --block-size 2MiB"},
		{"/d", 64 << 10, 2, 16 << 20, nil, "corgifs mount /d MNT --block-size 64KiB --parts 2 --max-memory 16MiB"},
		{"/d", 64 << 10, 1, 16 << 20, &BufferChoice{Percent: 5, Bytes: 4 << 20}, "corgifs mount /d MNT --block-size 64KiB --buffer 5% --max-memory 16MiB"},
		{"/d", 64 << 10, 1, 16 << 20, &BufferChoice{Percent: 50, Bytes: 64 << 20}, "corgifs mount /d MNT --block-size 64KiB --buffer 50% --max-memory 144MiB"},
	}
	for _, tc := range cases {
		if got := MountLine(tc.src, tc.block, tc.parts, tc.mem, tc.buf); got != tc.want {
			t.Errorf("MountLine(%q, %d, %d, %d, %+v)\n got %s\nwant %s", tc.src, tc.block, tc.parts, tc.mem, tc.buf, got, tc.want)
		}
	}
}

// The probe reads the files a mount would index: those --include names,
// not empty, through a symbolic link only when asked to follow it.
func TestProbeFilesListsTheFilesAMountWouldIndex(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int{"a.tfrecord": 10, "sub/b.tfrecords": 20, "empty.tfrecord": 0, "c.txt": 5} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "a.tfrecord"), filepath.Join(dir, "link.tfrecord")); err != nil {
		t.Fatal(err)
	}
	names := func(fs []ProbeFile) string {
		var s []string
		for _, f := range fs {
			s = append(s, strings.TrimPrefix(f.Path, dir+"/"))
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		follow bool
		want   string
	}{{false, "a.tfrecord,sub/b.tfrecords"}, {true, "a.tfrecord,link.tfrecord,sub/b.tfrecords"}} {
		fs, err := ProbeFiles(dir, nil, tc.follow)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(fs); got != tc.want {
			t.Errorf("follow %v: %s, want %s", tc.follow, got, tc.want)
		}
	}
	if _, err := ProbeFiles(dir, []string{"*.csv"}, false); err == nil || !strings.Contains(err.Error(), "match {include} *.csv") {
		t.Errorf("no csv files: err = %v", err)
	}
}
