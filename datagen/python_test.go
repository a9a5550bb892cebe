package datagen

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/corgifs/corgifs/internal/testenv"
	"io/fs"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// python is Debian's interpreter, where python3-numpy and python3-sklearn
// install (a python3 earlier on PATH, such as pyenv's, may lack them).
const python = "/usr/bin/python3"

// pythonReader reads files with the readers a user of their format has:
// csv, json, tarfile (grouping members into samples as WebDataset does),
// numpy.load and sklearn's load_svmlight_file. It reads a JSON list of
// pyJobs on stdin, all in one interpreter (importing numpy and sklearn
// takes seconds), and prints for each job, per file, the list of its
// records as [id, label, values], id -1 where the format has none
// (Fashion-MNIST's uint8 .npy).
const pythonReader = `
import csv, json, re, sys, tarfile
try:
    import numpy as np
    from sklearn.datasets import load_svmlight_file
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(3)  # missingExit

def read(kind, pixels, dim, paths):
    name = "p" if pixels else "f"
    cast = (lambda v: int(v)) if pixels else (lambda v: float(np.float32(v)))
    out = []
    for path in paths:
        recs = []
        if kind == "csv":
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
            assert rows[0] == ["id", "label"] + [name + str(i) for i in range(dim)], rows[0]
            recs = [[int(r[0]), int(r[1]), [cast(v) for v in r[2:]]] for r in rows[1:]]
        elif kind == "jsonl":
            key = "pixels" if pixels else "features"
            with open(path) as f:
                for line in f:
                    o = json.loads(line)
                    assert sorted(o) == sorted(["id", "label", key]), o
                    recs.append([o["id"], o["label"], [cast(v) for v in o[key]]])
        elif kind == "libsvm":
            X, y, q = load_svmlight_file(path, n_features=dim, query_id=True, zero_based=False)
            X = X.toarray()
            recs = [[int(q[i]), int(y[i]), [cast(v) for v in X[i]]] for i in range(len(y))]
        elif kind == "wds":
            samples, key = [], None
            with tarfile.open(path) as t:
                for m in t:
                    g = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", m.name)
                    assert m.isreg() and g, m.name
                    if g.group(1) != key:
                        key = g.group(1)
                        samples.append({"__key__": key})
                    samples[-1][g.group(2)] = t.extractfile(m).read()
            for s in samples:
                assert s["__key__"] == "%08d" % int(s["id"]), s["__key__"]
                if pixels:
                    assert sorted(s) == ["__key__", "cls", "id", "pixels"], sorted(s)
                    vals = [int(v) for v in np.frombuffer(s["pixels"], dtype=np.uint8)]
                else:
                    assert sorted(s) == ["__key__", "bin", "cls", "id"], sorted(s)
                    vals = [float(v) for v in np.frombuffer(s["bin"], dtype="<f4")]
                recs.append([int(s["id"]), int(s["cls"]), vals])
        elif kind == "npy":
            a = np.load(path)
            assert a.ndim == 2 and not np.isfortran(a), a.shape
            if pixels:
                assert a.dtype == np.uint8 and a.shape[1] == dim + 1, (a.dtype, a.shape)
                recs = [[-1, int(r[0]), [int(v) for v in r[1:]]] for r in a]
            else:
                assert a.dtype == np.float32 and a.shape[1] == dim + 2, (a.dtype, a.shape)
                recs = [[int(r[1]), int(r[0]), [float(v) for v in r[2:]]] for r in a]
        out.append(recs)
    return out

json.dump([read(j["format"], j["pixels"], j["dim"], j["files"]) for j in json.load(sys.stdin)], sys.stdout)
`

// missingExit is pythonReader's exit status when it cannot import numpy
// or sklearn.
const missingExit = 3

// pyRec is a record as pythonReader prints it.
type pyRec struct {
	id, label int
	values    []float64
}

func (r *pyRec) UnmarshalJSON(b []byte) error {
	var a [3]json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if err := json.Unmarshal(a[0], &r.id); err != nil {
		return err
	}
	if err := json.Unmarshal(a[1], &r.label); err != nil {
		return err
	}
	return json.Unmarshal(a[2], &r.values)
}

// A pyJob is the files of one format for pythonReader: Fashion-MNIST's
// (pixels) or synthetic records of dim values.
type pyJob struct {
	Format string   `json:"format"`
	Pixels bool     `json:"pixels"`
	Dim    int      `json:"dim"`
	Files  []string `json:"files"`
}

// readWithPython reads the files of every job with pythonReader, in one
// interpreter, and returns per job the records of each of its files. It
// skips the test unless Debian's python3 has numpy and sklearn.
func readWithPython(t *testing.T, jobs []pyJob) [][][]pyRec {
	t.Helper()
	in, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(python, "-c", pythonReader)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == missingExit || errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			testenv.Missing(t, "%s cannot import numpy and sklearn (Debian: apt-get install python3-numpy python3-sklearn): %v\n%s", python, err, stderr.String())
		}
		t.Fatalf("python reading %s: %v\n%s", in, err, stderr.String())
	}
	var out [][][]pyRec
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("python reading %s: %v", in, err)
	}
	if len(out) != len(jobs) {
		t.Fatalf("python read %d jobs of %d", len(out), len(jobs))
	}
	return out
}

// TestEveryFormatHoldsTheRecordsOfTheTFRecordVersionForIndependentReaders
// writes one synthetic dataset in every format and reads each with the
// reader a user of the format has (Python's csv and json, tarfile grouped
// as WebDataset groups members, numpy.load, sklearn's load_svmlight_file):
// every file holds the same records, in the same order, as the TFRecord
// version, features equal to float32 precision.
func TestEveryFormatHoldsTheRecordsOfTheTFRecordVersionForIndependentReaders(t *testing.T) {
	s := Synthetic{Records: 301, Features: 5, Classes: 3, Files: 3, Seed: 11, FirstID: 7}
	want := readFiles(t, write(t, s))
	formats := Formats()[1:]
	var jobs []pyJob
	for _, format := range formats {
		s.Format = format
		sum := write(t, s)
		for i, path := range sum.Files {
			if !strings.HasSuffix(path, s.FileName(i)) || !strings.HasSuffix(path, extension(format)) {
				t.Errorf("%s: file %d is %s, want the name %s", format, i, path, s.FileName(i))
			}
		}
		jobs = append(jobs, pyJob{Format: format, Dim: s.Features, Files: sum.Files})
	}
	read := readWithPython(t, jobs)
	for j, format := range formats {
		got := read[j]
		if len(got) != len(want) {
			t.Fatalf("%s: %d files, tfrecord has %d", format, len(got), len(want))
		}
		for f := range want {
			if len(got[f]) != len(want[f]) {
				t.Fatalf("%s: file %d holds %d records, tfrecord's %d", format, f, len(got[f]), len(want[f]))
			}
			for k, w := range want[f] {
				g := got[f][k]
				values := make([]float32, len(g.values))
				for j, v := range g.values {
					values[j] = float32(v)
				}
				if g.id != w.id || g.label != w.label || !slices.Equal(values, w.values) {
					t.Fatalf("%s: file %d record %d is id %d label %d %v; tfrecord has id %d label %d %v",
						format, f, k, g.id, g.label, values, w.id, w.label, w.values)
				}
			}
		}
	}
}

// TestFashionFormatsHoldTheImagesForIndependentReaders converts a tiny
// Fashion-MNIST into every format: Python's readers find the same labels,
// ids and raw pixels, in the same order, as in the TFRecord version (the
// uint8 .npy has no ids).
func TestFashionFormatsHoldTheImagesForIndependentReaders(t *testing.T) {
	from := writeTinyFashion(t, makeTinySplit([]uint8{3, 1, 4, 1, 5, 9, 2, 6}), makeTinySplit([]uint8{2, 7, 1}))
	f := FashionMNIST{From: from, Files: 2, Seed: 4}
	wantTrain, _, err := f.Write(t.Context(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := readFashion(t, wantTrain)
	formats := Formats()[1:]
	var jobs []pyJob
	for _, format := range formats {
		f.Format = format
		train, test, err := f.Write(t.Context(), t.TempDir(), nil)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if test.Records != 3 {
			t.Errorf("%s: %d test records, want 3", format, test.Records)
		}
		jobs = append(jobs, pyJob{Format: format, Pixels: true, Dim: 6, Files: train.Files})
	}
	read := readWithPython(t, jobs)
	for j, format := range formats {
		got := slices.Concat(read[j]...)
		if len(got) != len(want) {
			t.Fatalf("%s: %d records, tfrecord has %d", format, len(got), len(want))
		}
		for k, w := range want {
			g := got[k]
			pixels := make([]byte, len(g.values))
			for j, v := range g.values {
				if v != math.Trunc(v) || v < 0 || v > 255 {
					t.Fatalf("%s: record %d pixel %d is %v", format, k, j, v)
				}
				pixels[j] = byte(v)
			}
			if (g.id != w.id && !(format == FormatNPY && g.id == -1)) || g.label != w.label || !bytes.Equal(pixels, w.image) {
				t.Fatalf("%s: record %d is id %d label %d %v; tfrecord has id %d label %d %v", format, k, g.id, g.label, pixels, w.id, w.label, w.image)
			}
		}
	}
}
