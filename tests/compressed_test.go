package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/internal/testenv"
)

// compressTool writes file in compressed into out, with a tool other than
// corgifs's own code.
type compressTool struct {
	name string
	ext  string // added to the file's name; "" keeps .tfrecord, as TensorFlow does
	cmd  func(in, out string) *exec.Cmd
}

func pyScript(script string, args ...string) *exec.Cmd {
	return exec.Command(python, append([]string{"-c", script}, args...)...)
}

func shell(script string, args ...string) *exec.Cmd {
	return exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
}

var compressTools = []compressTool{
	// tf.io.TFRecordWriter(options="GZIP") writes the whole TFRecord
	// stream gzip-compressed under the name it is given.
	{"python-gzip", "", func(in, out string) *exec.Cmd {
		return pyScript("import gzip,sys; gzip.open(sys.argv[2],'wb').write(open(sys.argv[1],'rb').read())", in, out)
	}},
	// options="ZLIB": one zlib stream.
	{"python-zlib", "", func(in, out string) *exec.Cmd {
		return pyScript("import zlib,sys; open(sys.argv[2],'wb').write(zlib.compress(open(sys.argv[1],'rb').read(), 6))", in, out)
	}},
	// Concatenated gzip members, as BGZF and `cat a.gz b.gz` make.
	{"python-gzip-members", ".gz", func(in, out string) *exec.Cmd {
		return pyScript("import gzip,sys\nd=open(sys.argv[1],'rb').read()\nopen(sys.argv[2],'wb').write(b''.join(gzip.compress(d[i:i+9000]) for i in range(0,len(d),9000)))", in, out)
	}},
	{"gzip-9", ".gz", func(in, out string) *exec.Cmd { return shell(`gzip -9 -c "$1" > "$2"`, in, out) }},
	{"pigz", ".gz", func(in, out string) *exec.Cmd { return shell(`pigz -p 2 -b 32 -c "$1" > "$2"`, in, out) }},
	// The zstd CLI writes a file as one frame, which corgifs serves as
	// one block (TestSingleFrameZstdIsServedAsOneBlockWithAWarningNamingIt):
	// here it compresses chunks, each a frame (the files are 32 KiB).
	{"zstd", ".zst", zstdChunks(20000)},
	{"zstd-long", ".zst", zstdChunks(12000, "--long=27")},
	{"zstd-frames", ".zst", zstdChunks(16384)},
}

// zstdChunks writes a frame per chunk bytes of the input, each by the
// zstd CLI with args.
func zstdChunks(chunk int, args ...string) func(in, out string) *exec.Cmd {
	return func(in, out string) *exec.Cmd {
		return pyScript("import subprocess,sys\nd=open(sys.argv[1],'rb').read()\nn=int(sys.argv[3])\nopen(sys.argv[2],'wb').write(b''.join(subprocess.run(['zstd','-q','-c']+sys.argv[4:],input=d[i:i+n],capture_output=True,check=True).stdout for i in range(0,len(d),n)))", append([]string{in, out, fmt.Sprint(chunk)}, args...)...)
	}
}

// compressedCopy writes every file of src compressed by one of the tools,
// in turn, into a new directory.
func compressedCopy(t *testing.T, src string) string {
	t.Helper()
	for _, tool := range []string{"pigz", "zstd", "gzip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is not installed (Debian package %s)", tool, tool)
		}
	}
	names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if len(names) < len(compressTools) {
		t.Fatalf("%d files for %d tools", len(names), len(compressTools))
	}
	dst := filepath.Join(t.TempDir(), "compressed")
	os.Mkdir(dst, 0o755)
	for i, n := range names {
		tool := compressTools[i%len(compressTools)]
		out := filepath.Join(dst, filepath.Base(n)+tool.ext)
		if b, err := tool.cmd(n, out).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", tool.name, n, err, b)
		}
	}
	return dst
}

// Files compressed by gzip, pigz, zstd (with and without --long, in
// frames larger and smaller than a block, never one frame: see
// TestSingleFrameZstdIsServedAsOneBlockWithAWarningNamingIt) and Python's gzip and zlib modules, as TensorFlow writes
// GZIP and ZLIB TFRecord files, are served decompressed by every strategy:
// each epoch holds every record of the decompressed copy exactly once and
// equals the decompressed copy's epoch byte for byte (the blocks are cut
// alike), and a read at any offset equals the sequential read.
func TestCompressedSourcesServeEveryRecordOfTheirDecompressedCopyExactlyOnce(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	plain := genSynthetic(t, 1600, 24, 4, len(compressTools), "clustered")
	comp := compressedCopy(t, plain)
	want := sortedHashes(sourceRecords(t, plain))
	const parts = 2
	common := []string{"--parts", fmt.Sprint(parts), "--epochs", "1", "--seed", "5", "--block-size", "16KiB"}
	cache := t.TempDir() // one index of the compressed copy for every mount
	r := rand.New(rand.NewPCG(5, 6))
	for _, strategy := range []string{"corgipile", "block", "local", "pls", "none", "full", "window", "once"} {
		t.Run(strategy, func(t *testing.T) {
			flags := append(slices.Clone(common), "--strategy", strategy)
			m := startMount(t, comp, append(flags, "--cache-dir", cache)...)
			var got [][32]byte
			served := make([][]byte, parts)
			for i := range parts {
				served[i] = m.read(0, i, parts)
				got = append(got, hashes(frames(t, served[i]))...)
			}
			if !slices.Equal(sortedHashes(got), want) {
				t.Fatalf("epoch 0 serves %d records, the decompressed copy holds %d (or other ones)", len(got), len(want))
			}
			for i := range parts {
				f, err := os.Open(m.part(0, i, parts))
				if err != nil {
					t.Fatal(err)
				}
				for range 20 {
					off := r.Int64N(int64(len(served[i])) + 1)
					p := make([]byte, 1+r.IntN(40000))
					n, _ := f.ReadAt(p, off)
					if !bytes.Equal(p[:n], served[i][off:min(int64(len(served[i])), off+int64(len(p)))]) {
						t.Fatalf("part %d: %d bytes at %d differ from the sequential read", i, len(p), off)
					}
				}
				f.Close()
			}
			// Blocks are cut by the same rule on decompressed offsets,
			// so every strategy serves the decompressed copy's bytes.
			pm := startMount(t, plain, flags...)
			for i := range parts {
				if !bytes.Equal(pm.read(0, i, parts), served[i]) {
					t.Fatalf("part %d differs from the decompressed copy's", i)
				}
			}
		})
	}
}

// A zstd file of one frame can restart decoding only at its start, so it
// is one block (not cut like its decompressed copy, whose blocks would each
// decode from the file's start at every load): the mount's log warns,
// naming the file, and an epoch serves every record exactly once.
func TestSingleFrameZstdIsServedAsOneBlockWithAWarningNamingIt(t *testing.T) {
	if _, err := exec.LookPath("zstd"); err != nil {
		testenv.Missing(t, "zstd is not installed (Debian package zstd)")
	}
	plain := genSynthetic(t, 600, 24, 4, 3, "clustered")
	names, _ := filepath.Glob(filepath.Join(plain, "*.tfrecord"))
	src := filepath.Join(t.TempDir(), "src")
	os.Mkdir(src, 0o755)
	var single []string
	for i, n := range names {
		script, ext := `gzip -6 -c "$1" > "$2"`, ".gz"
		switch i {
		case 0:
			script, ext = `zstd -q -c "$1" > "$2"`, ".zst"
		case 1:
			script, ext = `zstd -q --long=27 -c "$1" > "$2"`, ".zst"
		}
		out := filepath.Join(src, filepath.Base(n)+ext)
		if b, err := shell(script, n, out).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, b)
		}
		if ext == ".zst" {
			single = append(single, out)
		}
	}
	const parts = 2
	m := startMount(t, src, "--parts", fmt.Sprint(parts), "--strategy", "corgipile", "--block-size", "16KiB", "--seed", "7")
	var got [][32]byte
	for i := range parts {
		got = append(got, hashes(frames(t, m.read(0, i, parts)))...)
	}
	if !slices.Equal(sortedHashes(got), sortedHashes(sourceRecords(t, plain))) {
		t.Fatalf("epoch 0 serves %d records, not each of the decompressed copy's once", len(got))
	}

	ix, err := index.Build(t.Context(), blocktest.Dir(t, src, false), index.Options{BlockSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	blocks := make(map[string]int)
	for _, b := range ix.Blocks {
		blocks[filepath.Join(src, ix.Files[b.File].Path)]++
	}
	warned := func(log, path string) bool {
		return slices.ContainsFunc(slices.Collect(strings.Lines(log)), func(l string) bool {
			return strings.Contains(l, "one frame") && strings.Contains(l, "one block") && strings.Contains(l, path)
		})
	}
	log, _ := awaitLog(m.log.String, func(log string) bool {
		return !slices.ContainsFunc(single, func(path string) bool { return !warned(log, path) })
	})
	for _, path := range single {
		fi := slices.IndexFunc(ix.Files, func(f index.File) bool { return filepath.Join(src, f.Path) == path })
		if size := ix.Files[fi].Access.Size; size <= 16<<10 {
			t.Fatalf("%s: %d bytes decompressed, want more than a block", path, size)
		}
		if blocks[path] != 1 {
			t.Fatalf("%s: %d blocks, want 1", path, blocks[path])
		}
		if !warned(log, path) {
			t.Fatalf("no warning naming %s:\n%s", path, log)
		}
	}
	if gz := filepath.Join(src, filepath.Base(names[2])+".gz"); blocks[gz] < 2 {
		t.Fatalf("%s: %d blocks, want it cut", gz, blocks[gz])
	}
}

// A byte flipped in a compressed source (size and modification time kept)
// fails with EIO the reads of the parts whose blocks decode it (worked out
// from the index and `corgifs order`), and the other parts read cleanly;
// the log names the file.
func TestACorruptCompressedByteIsEIOInThePartsOfItsBlocksOnly(t *testing.T) {
	plain := genSynthetic(t, 1200, 24, 4, 4, "clustered")
	src := filepath.Join(t.TempDir(), "src")
	os.Mkdir(src, 0o755)
	names, _ := filepath.Glob(filepath.Join(plain, "*.tfrecord"))
	for _, n := range names {
		if b, err := shell(`gzip -6 -c "$1" > "$2"`, n, filepath.Join(src, filepath.Base(n)+".gz")).CombinedOutput(); err != nil {
			t.Fatalf("gzip: %v\n%s", err, b)
		}
	}
	const parts = 4
	flags := []string{"--parts", fmt.Sprint(parts), "--strategy", "block", "--block-size", "16KiB", "--seed", "3"}
	m := startMount(t, src, flags...)
	path := filepath.Join(src, filepath.Base(names[1])+".gz")
	fi, _ := os.Stat(path)
	data, _ := os.ReadFile(path)
	damage := int64(len(data) * 2 / 3)
	data[damage] ^= 0x10

	// The parts that may fail: those holding records of the blocks that
	// decode from the access point before the damaged byte, or of the
	// block before them (whose end decodes past that point).
	ix, err := index.Build(t.Context(), blocktest.Dir(t, src, false), index.Options{BlockSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	fidx := slices.IndexFunc(ix.Files, func(f index.File) bool { return f.Path == filepath.Base(path) })
	acc := ix.Files[fidx].Access
	cover := acc.Points[0].Out
	for _, p := range acc.Points {
		if p.In/8 <= damage {
			cover = p.Out
		}
	}
	var ranges [][2]int64
	for id, blk := range ix.Blocks {
		if blk.File != int32(fidx) || acc.PointBefore(blk.Offset) != cover {
			continue
		}
		if len(ranges) == 0 && id > 0 && ix.Blocks[id-1].File == blk.File {
			prev := ix.Blocks[id-1]
			ranges = append(ranges, [2]int64{prev.Offset, prev.Offset + prev.Len})
		}
		ranges = append(ranges, [2]int64{blk.Offset, blk.Offset + blk.Len})
	}
	var may []int
	for i := range parts {
		out := corgifs(t, append([]string{"order", src, "--part", fmt.Sprint(i), "--cache-dir", t.TempDir()}, flags...)...)
		for l := range strings.Lines(out) {
			var name string
			var off, n int64
			if _, err := fmt.Sscan(l, &name, &off, &n); err == nil && name == filepath.Base(path) &&
				slices.ContainsFunc(ranges, func(r [2]int64) bool { return r[0] <= off && off < r[1] }) {
				may = append(may, i)
				break
			}
		}
	}
	writeFile(t, path, data)
	os.Chtimes(path, fi.ModTime(), fi.ModTime())
	var failed []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() {
			_, err := os.ReadFile(m.part(0, i, parts))
			switch {
			case err == nil:
			case errorsIsEIO(err):
				mu.Lock()
				failed = append(failed, i)
				mu.Unlock()
			default:
				t.Errorf("part %d: %v, want EIO or data", i, err)
			}
		})
	}
	wg.Wait()
	slices.Sort(failed)
	if len(failed) == 0 || slices.ContainsFunc(failed, func(i int) bool { return !slices.Contains(may, i) }) {
		t.Fatalf("parts %v failed with EIO, want some of %v (those holding the blocks that decode the damaged byte)\n%s", failed, may, m.log)
	}
	t.Logf("parts %v failed, of %v that may", failed, may)
	if log, ok := m.logHas(path); !ok {
		t.Fatalf("the log does not name %s:\n%s", path, log)
	}
}

// Compressed objects in an S3 bucket are served from their access points
// with ranged GETs: the same parts as the same files in a local directory.
func TestS3CompressedObjectsServeTheSamePartsAsTheLocalFiles(t *testing.T) {
	s := startS3(t)
	plain := genSynthetic(t, 1500, 16, 4, 3, "clustered")
	src := filepath.Join(t.TempDir(), "src")
	os.Mkdir(src, 0o755)
	names, _ := filepath.Glob(filepath.Join(plain, "*.tfrecord"))
	for i, n := range names {
		tool := []compressTool{compressTools[0], compressTools[3], compressTools[7]}[i%3] // python gzip, gzip -9, zstd frames
		if b, err := tool.cmd(n, filepath.Join(src, filepath.Base(n)+tool.ext)).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", tool.name, err, b)
		}
	}
	s.upload("data", "gz", src)
	flags := []string{"--seed", "11", "--parts", "2", "--block-size", "16KiB"}
	local := startMount(t, src, flags...)
	remote := startMount(t, "s3://data/gz", append(flags, "--s3-endpoint", s.endpoint)...)
	lp, rp := readAll(t, local), readAll(t, remote)
	for key, b := range lp {
		if !bytes.Equal(b, rp[key]) {
			t.Fatalf("part %s (epoch/part/K): %d bytes from S3 differ from %d bytes from the local files", key, len(rp[key]), len(b))
		}
	}
	var got [][32]byte
	for i := range 3 {
		got = append(got, hashes(frames(t, rp[fmt.Sprintf("0/%d/3", i)]))...)
	}
	if !slices.Equal(sortedHashes(got), sortedHashes(sourceRecords(t, plain))) {
		t.Fatal("the parts from S3 do not hold every record of the decompressed copy exactly once")
	}
}
