package tests

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/internal/testenv"
)

// formatSet is a small dataset of one format, written by the test, and
// how to mount it.
type formatSet struct {
	name  string   // the --format value
	ext   string   // of the served parts
	flags []string // format flags for mount and order
	files map[string][]byte
	// prologue and epilogue return the lengths of a served part's bytes
	// before and after its records.
	prologue func(part []byte) int
	epilogue int
	// text: the files are lines, whose last one gets a line end.
	text bool
}

// npyFile returns a .npy file of rows of cols float32 values.
func npyFile(rows [][]float32) []byte {
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", len(rows), len(rows[0]))
	pad := (64 - (10+len(dict)+1)%64) % 64
	h := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(h[8:], uint16(len(dict)+pad+1))
	h = append(append(append(h, dict...), bytes.Repeat([]byte{' '}, pad)...), '\n')
	for _, r := range rows {
		for _, v := range r {
			h = binary.LittleEndian.AppendUint32(h, math.Float32bits(v))
		}
	}
	return h
}

// wdsShard returns a tar of samples KEY.cls (the label) and KEY.bin
// (bytes), after a directory entry, which belongs to no sample.
func wdsShard(t *testing.T, prefix string, n int, r *rand.Rand) []byte {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	w.WriteHeader(&tar.Header{Name: prefix + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	for i := range n {
		key := fmt.Sprintf("%s/sample%05d", prefix, i)
		bin := make([]byte, 50+r.IntN(900))
		for j := range bin {
			bin[j] = byte(r.IntN(256))
		}
		for _, m := range []struct {
			ext  string
			data []byte
		}{{".cls", []byte(strconv.Itoa(i % 10))}, {".bin", bin}} {
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

// formatSets returns a dataset of every format but TFRecord, whose mounts
// the other tests cover.
func formatSets(t *testing.T) []formatSet {
	r := rand.New(rand.NewPCG(13, 14))
	words := func() string {
		var b strings.Builder
		for range 1 + r.IntN(20) {
			b.WriteString([]string{"corgi", "pile", "shuffle", "block", "epoch"}[r.IntN(5)])
			b.WriteByte(' ')
		}
		return b.String()
	}
	var csvA, csvB, csvC, jl1, jl2, svm1, svm2, txt1 []byte
	csvA, csvB, csvC = []byte("id,label,text\r\n"), []byte("id,label,text\n"), []byte("id,label,text\n")
	for i := range 150 {
		csvA = fmt.Appendf(csvA, "%d,%d,\"%s,\nsecond \"\"line\"\"\"\r\n", i, i%2, words())
		csvB = fmt.Appendf(csvB, "%d,%d,%s\n", 1000+i, i%3, words())
		jl1 = fmt.Appendf(jl1, "{\"id\": %d, \"label\": %d, \"text\": %q}\n", i, i%2, words())
		jl2 = fmt.Appendf(jl2, "{\"id\": %d, \"x\": [%d, %g]}\n", 500+i, i, float64(i)/7)
		svm1 = fmt.Appendf(svm1, "%d 1:%d 3:%g 9:%g\n", i%2, i, float64(i)/3, float64(r.IntN(100)))
		svm2 = fmt.Appendf(svm2, "%d 2:%g 10:1\n", (i+1)%2, float64(i)/5)
		txt1 = fmt.Appendf(txt1, "line %d %s\n", i, words())
	}
	csvC = append(csvC, "7,1,\"no line end, last row\""...)
	jl2 = append(jl2, `{"id": 999, "last": "no line end"}`...)
	svm2 = append(svm2, "1 1:1 10:2"...)
	var npyA, npyB [][]float32
	for i := range 300 {
		row := []float32{float32(i), float32(i % 2), r.Float32(), r.Float32()}
		if i < 200 {
			npyA = append(npyA, row)
		} else {
			npyB = append(npyB, row)
		}
	}
	fixed := []byte("HDR!")
	for i := range 400 {
		rec := make([]byte, 12)
		binary.LittleEndian.PutUint32(rec, uint32(i))
		for j := 4; j < 12; j++ {
			rec[j] = byte(r.IntN(256))
		}
		fixed = append(fixed, rec...)
	}
	csvHeader := func(part []byte) int { return bytes.IndexByte(part, '\n') + 1 }
	npyHeader := func(part []byte) int { return 10 + int(binary.LittleEndian.Uint16(part[8:])) }
	none := func([]byte) int { return 0 }
	return []formatSet{
		{name: "csv", ext: ".csv", files: map[string][]byte{"a.csv": csvA, "b.csv": csvB, "c.csv": csvC}, prologue: csvHeader, text: true},
		{name: "jsonl", ext: ".jsonl", flags: []string{"--check"}, files: map[string][]byte{"a.jsonl": jl1, "b.jsonl": jl2}, prologue: none, text: true},
		{name: "libsvm", ext: ".libsvm", files: map[string][]byte{"a.libsvm": svm1, "b.libsvm": svm2}, prologue: none, text: true},
		{name: "lines", ext: ".txt", files: map[string][]byte{"a.txt": txt1, "b.txt": []byte("one\r\ntwo\nthree")}, prologue: none, text: true},
		{name: "wds", ext: ".tar", files: map[string][]byte{"a.tar": wdsShard(t, "a", 60, r), "b.tar": wdsShard(t, "b", 45, r)}, prologue: none, epilogue: 1024},
		{name: "npy", ext: ".npy", files: map[string][]byte{"a.npy": npyFile(npyA), "b.npy": npyFile(npyB)}, prologue: npyHeader},
		{name: "fixed", ext: ".bin", flags: []string{"--format", "fixed", "--record-size", "12", "--header-bytes", "4"}, files: map[string][]byte{"a.bin": fixed}, prologue: none},
	}
}

// write writes the set's files into a new source directory.
func (s formatSet) write(t *testing.T) string {
	src := filepath.Join(t.TempDir(), "src")
	for name, data := range s.files {
		writeFile(t, filepath.Join(src, name), data)
	}
	return src
}

// formatOrderFlags are the flags that make a mount's order; mount and
// order take them alike.
var formatOrderFlags = []string{"--seed", "5", "--block-size", "2KiB", "--buffer", "8KiB", "--max-memory", "64MiB"}

// checkPartsWithPython has Python's own readers check the parts of each
// epoch: each part a valid file of the format, and the records of each
// epoch's parts the records of the sources, each once.
const checkPartsPython = `
import collections, csv, io, json, sys, tarfile
spec = json.load(sys.stdin)
fmt, sources, epochs = spec["format"], spec["sources"], spec["epochs"]

def csv_rows(path, want_header=None):
    with open(path, newline="") as f:
        rows = [tuple(r) for r in csv.reader(f)]
    if want_header is not None and rows[0] != want_header:
        sys.exit(f"{path}: header {rows[0]}, want {want_header}")
    return rows[0], rows[1:]

def lines(path):
    with open(path, "rb") as f:
        ls = f.read().splitlines(keepends=True)
    if ls and not ls[-1].endswith(b"\n"):
        ls[-1] += b"\n"
    return ls

def records(path, source):
    if fmt == "csv":
        return csv_rows(path, None if source else header)[1]
    if fmt == "jsonl":
        return [json.dumps(json.loads(l), sort_keys=True) for l in lines(path)]
    if fmt == "lines":
        return lines(path)
    if fmt == "libsvm":
        from sklearn.datasets import load_svmlight_file
        X, y = load_svmlight_file(path, n_features=16, zero_based=False)
        return [(float(y[i]), tuple(X[i].toarray().ravel())) for i in range(X.shape[0])]
    if fmt == "npy":
        import numpy as np
        a = np.load(path)
        if a.dtype != np.float32 or a.ndim != 2 or a.shape[1] != 4:
            sys.exit(f"{path}: dtype {a.dtype}, shape {a.shape}")
        return [tuple(r) for r in a.tolist()]
    if fmt == "fixed":
        with open(path, "rb") as f:
            b = f.read()
        if source:
            b = b[4:]
        if len(b) % 12:
            sys.exit(f"{path}: {len(b)} bytes, not whole records")
        return [b[i:i + 12] for i in range(0, len(b), 12)]
    if fmt == "wds":
        out, keys = [], set()
        with tarfile.open(path) as tf:
            members = [m for m in tf.getmembers() if m.isfile()]
            i = 0
            while i < len(members):
                key = members[i].name.split("/")[-1].split(".")[0]
                key = "/".join(members[i].name.split("/")[:-1] + [key])
                names = [m.name for m in members[i:i + 2]]
                if names != [key + ".cls", key + ".bin"]:
                    sys.exit(f"{path}: sample {key} has members {names}, want .cls then .bin together")
                if key in keys:
                    sys.exit(f"{path}: key {key} twice")
                keys.add(key)
                out.append((key, tf.extractfile(members[i]).read(), tf.extractfile(members[i + 1]).read()))
                i += 2
        return out
    sys.exit("unknown format " + fmt)

header = csv_rows(sources[0])[0] if fmt == "csv" else None
want = collections.Counter()
for s in sources:
    want.update(records(s, True))
for e, parts in enumerate(epochs):
    got = collections.Counter()
    for p in parts:
        got.update(records(p, False))
    if got != want:
        sys.exit(f"epoch {e}: the parts hold {sum(got.values())} records, the sources {sum(want.values())}; "
                 f"{sum((got - want).values())} extra, {sum((want - got).values())} missing")
print("ok", sum(want.values()))
`

// pythonChecksParts runs checkPartsPython; it skips where Debian's python3
// lacks numpy or sklearn.
func pythonChecksParts(t *testing.T, format string, sources []string, epochs [][]string) {
	t.Helper()
	if format == "npy" || format == "libsvm" {
		if out, err := exec.Command(python, "-c", "import numpy, sklearn").CombinedOutput(); err != nil {
			testenv.Missing(t, "%s cannot import numpy and sklearn (Debian: apt-get install python3-sklearn; .ci/run does): %v\n%s", python, err, out)
		}
	}
	spec, _ := json.Marshal(map[string]any{"format": format, "sources": sources, "epochs": epochs})
	cmd := exec.Command(python, "-c", checkPartsPython)
	cmd.Stdin = bytes.NewReader(spec)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok ") {
		t.Fatalf("python's readers refuse the parts: %v\n%s", err, out)
	}
}

// For every format, through a real mount: parts have the format's
// extension and are exactly as large at stat as what reads return; reads
// at any offset return the bytes of a sequential read; the K parts of each
// epoch hold every source record once and are valid files for Python's
// own readers (csv, json, tarfile and GNU tar, numpy.load,
// sklearn's load_svmlight_file); a second mount serves the same bytes;
// and corgifs order names, for each served record, its bytes in the source.
func TestEveryFormatIsServedExactlyOnceValidAndDeterministic(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	const parts, epochs = 3, 2
	for _, set := range formatSets(t) {
		t.Run(set.name, func(t *testing.T) {
			src := set.write(t)
			flags := append(append([]string{"--parts", fmt.Sprint(parts), "--epochs", fmt.Sprint(epochs)}, formatOrderFlags...), set.flags...)
			m := startMount(t, src, flags...)
			if m.part(0, 0, 1); m.ext != set.ext {
				t.Fatalf("parts have extension %q, want %q", m.ext, set.ext)
			}
			var cfg api.Config
			b, _ := os.ReadFile(api.ConfigPath(m.dir))
			if json.Unmarshal(b, &cfg); cfg.Format != set.name {
				t.Fatalf("config.json says format %q, want %q", cfg.Format, set.name)
			}
			if ents, _ := os.ReadDir(filepath.Join(m.dir, "epoch-0000")); len(ents) != parts || ents[0].Name() != "part-00000-of-00003"+set.ext {
				t.Fatalf("epoch-0000 lists %v", ents)
			}
			served := map[string][]byte{}
			var byEpoch [][]string
			for e := range epochs {
				var paths []string
				for i := range parts {
					path := m.part(e, i, parts)
					fi, err := os.Stat(path)
					if err != nil {
						t.Fatal(err)
					}
					data := m.read(e, i, parts)
					if fi.Size() != int64(len(data)) {
						t.Fatalf("epoch %d part %d: stat says %d bytes, reads give %d", e, i, fi.Size(), len(data))
					}
					served[path] = data
					paths = append(paths, path)
				}
				byEpoch = append(byEpoch, paths)
			}
			// Any offset, any length, prologue and epilogue included.
			r := rand.New(rand.NewPCG(1, 2))
			for path, data := range served {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				for range 40 {
					off := r.Int64N(int64(len(data)) + 1)
					p := make([]byte, 1+r.IntN(5000))
					n, _ := f.ReadAt(p, off)
					if want := data[off:min(int64(len(data)), off+int64(len(p)))]; !bytes.Equal(p[:n], want) {
						t.Fatalf("%s: %d bytes at %d differ from the sequential read", path, len(p), off)
					}
				}
				f.Close()
			}
			if set.name == "wds" {
				for _, path := range byEpoch[0] {
					if out, err := exec.Command("tar", "-tvf", path).CombinedOutput(); err != nil {
						t.Fatalf("GNU tar -tvf %s: %v\n%s", path, err, out)
					}
				}
			}
			var sources []string
			for name := range set.files {
				sources = append(sources, filepath.Join(src, name))
			}
			pythonChecksParts(t, set.name, sources, byEpoch)
			// corgifs order: the records of a part are the source bytes
			// it names, in order, between the prologue and epilogue.
			for i := range parts {
				part := served[m.part(1, i, parts)]
				args := append(append([]string{"order", src, "--epoch", "1", "--part", fmt.Sprint(i), "--parts", fmt.Sprint(parts), "--cache-dir", t.TempDir()}, formatOrderFlags...), set.flags...)
				var want []byte
				for _, line := range strings.Split(strings.TrimSpace(corgifs(t, args...)), "\n") {
					var name string
					var off, n int64
					if _, err := fmt.Sscan(line, &name, &off, &n); err != nil {
						t.Fatalf("order line %q: %v", line, err)
					}
					rec := set.files[name][off : off+n]
					want = append(want, rec...)
					if set.text && off+n == int64(len(set.files[name])) && rec[len(rec)-1] != '\n' {
						want = append(want, '\n')
					}
				}
				if got := part[set.prologue(part) : len(part)-set.epilogue]; !bytes.Equal(got, want) {
					t.Fatalf("part %d: the records order names differ from the served ones at byte %d of %d", i, firstDiff(got, want), len(want))
				}
			}
			// A second mount serves the same bytes.
			m2 := startMount(t, src, flags...)
			for e := range epochs {
				for i := range parts {
					if !bytes.Equal(m2.read(e, i, parts), served[m.part(e, i, parts)]) {
						t.Fatalf("epoch %d part %d differs between two mounts", e, i)
					}
				}
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A byte changed in place (size and modification time kept) in a CSV, tar
// or .npy source fails the read of the one part that serves it with EIO;
// the other parts read cleanly.
func TestAFlippedSourceByteIsEIOInItsPartOnly(t *testing.T) {
	sets := map[string]formatSet{}
	for _, s := range formatSets(t) {
		sets[s.name] = s
	}
	for _, c := range []struct {
		name string
		file string
		at   func(data []byte) int // the byte to flip
	}{
		{"csv", "b.csv", func(d []byte) int { return len(d) / 2 }},
		{"wds", "a.tar", func(d []byte) int { return len(d) / 2 }},
		{"npy", "a.npy", func(d []byte) int { return len(d) - 7 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			set := sets[c.name]
			src := set.write(t)
			const parts = 3
			m := startMount(t, src, append(append([]string{"--parts", fmt.Sprint(parts)}, formatOrderFlags...), set.flags...)...)
			path := filepath.Join(src, c.file)
			fi, _ := os.Stat(path)
			data := set.files[c.file]
			bad := bytes.Clone(data)
			bad[c.at(data)] ^= 0x04
			writeFile(t, path, bad)
			os.Chtimes(path, fi.ModTime(), fi.ModTime())
			var failed []int
			var mu sync.Mutex
			for i := range parts {
				_, err := os.ReadFile(m.part(0, i, parts))
				switch {
				case err == nil:
				case errorsIsEIO(err):
					mu.Lock()
					failed = append(failed, i)
					mu.Unlock()
				default:
					t.Fatalf("part %d: %v, want EIO or data", i, err)
				}
			}
			if len(failed) != 1 {
				t.Fatalf("parts %v failed with EIO, want exactly one\n%s", failed, m.log)
			}
			if log, ok := m.logHas(path, "checksum"); !ok {
				t.Fatalf("the log does not name %s and the checksum:\n%s", path, log)
			}
		})
	}
}

func errorsIsEIO(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == syscall.EIO
}

// Sources whose structure is broken are refused when indexing, with the
// file and the offset.
func TestBrokenSourcesAreRefusedNamingFileAndOffset(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shard := wdsShard(t, "s", 5, r)
	badSum := bytes.Clone(shard)
	badSum[512+100] ^= 1 // the first sample's header (after the directory entry's)
	rows := [][]float32{{1, 2}, {3, 4}, {5, 6}}
	for _, c := range []struct {
		name  string
		files map[string][]byte
		want  []string
	}{
		{"tar header with a bad checksum", map[string][]byte{"a.tar": badSum}, []string{"a.tar", "offset 512", "checksum"}},
		{"truncated tar", map[string][]byte{"a.tar": shard[:len(shard)-2048]}, []string{"a.tar", "truncated"}},
		{"npy shorter than its header says", map[string][]byte{"a.npy": npyFile(rows)[:128+8]}, []string{"a.npy", "rows"}},
		{"csv files with different headers", map[string][]byte{"a.csv": []byte("id,x\n1,2\n"), "b.csv": []byte("id,y\n1,2\n")},
			[]string{"a.csv", "b.csv", `"id,x\n"`, `"id,y\n"`}},
		{"files of two formats", map[string][]byte{"a.csv": []byte("id\n1\n"), "b.npy": npyFile(rows)}, []string{"a.csv", "b.npy", "mixes formats"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := formatSet{files: c.files}.write(t)
			_, stderr, code := run("index", src, "--cache-dir", t.TempDir())
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Fatalf("stderr does not mention %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// The format flags are checked: an option of another format, a fixed
// format without its record size, an unknown name, and DALI's index of
// a source that is not TFRecord are errors saying so.
func TestFormatFlagsAreCheckedWithClearErrors(t *testing.T) {
	src := formatSet{files: map[string][]byte{"a.csv": []byte("id,x\n1,2\n3,4\n")}}.write(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"index", src, "--record-size", "8"}, "--record-size is an option of --format fixed"},
		{[]string{"index", src, "--format", "jsonl", "--header=false"}, "--header is an option of --format csv"},
		{[]string{"index", src, "--format", "fixed"}, "format fixed needs --record-size"},
		{[]string{"index", src, "--format", "parquet"}, "known formats: tfrecord, csv"},
		{[]string{"order", src, "--seed", "1", "--output", "dali"}, "the DALI index is for TFRecord"},
		{[]string{"order", src, "--seed", "1", "--format", "dali"}, "the DALI index is for TFRecord"},
	} {
		_, stderr, code := run(append(c.args, "--cache-dir", t.TempDir())...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("corgifs %s: exit %d, want an error saying %q:\n%s", strings.Join(c.args, " "), code, c.want, stderr)
		}
	}
	// --header=false reads the first row as a record.
	out, _, code := run("index", src, "--header=false", "--cache-dir", t.TempDir())
	if code != 0 || !strings.Contains(out, "records     3") {
		t.Errorf("index --header=false: exit %d\n%s", code, out)
	}
}
