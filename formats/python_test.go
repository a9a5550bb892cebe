package formats

import (
	"encoding/json"
	"github.com/corgifs/corgifs/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// pythonReader reads a served part with Python's standard library (csv,
// json, tarfile, ast for the .npy header), the readers training code
// uses, and prints its records as a JSON list of strings.
const pythonReader = `
import ast, csv, json, re, struct, sys, tarfile
kind, path = sys.argv[1], sys.argv[2]
out = []
if kind == "csv":
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    out = ["\x00".join(r) for r in rows]
elif kind == "jsonl":
    with open(path, "rb") as f:
        out = [json.dumps(json.loads(l), sort_keys=True) for l in f]
elif kind == "wds":
    # WebDataset's grouping: base_plus_ext, regular files only.
    key, seen = None, set()
    with tarfile.open(path) as t:
        for m in t:
            g = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", m.name)
            if not m.isreg() or not g:
                continue
            if g.group(1) != key:
                assert g.group(1) not in seen, "key %s not consecutive" % g.group(1)
                key = g.group(1)
                seen.add(key)
                out.append("")
            out[-1] += m.name + "=" + t.extractfile(m).read().decode("latin-1") + ";"
elif kind == "npy":
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"\x93NUMPY\x01\x00"
    n = struct.unpack("<H", b[8:10])[0]
    assert (10 + n) % 64 == 0
    h = ast.literal_eval(b[10:10 + n].decode("latin-1"))
    assert h["fortran_order"] is False
    size = {"<f4": 4, "<i4": 4, "|u1": 1}[h["descr"]]
    row = size
    for d in h["shape"][1:]:
        row *= d
    data = b[10 + n:]
    assert len(data) == row * h["shape"][0], (len(data), h)
    out = [h["descr"], str(list(h["shape"]))] + [data[i:i + row].hex() for i in range(0, len(data), row)]
json.dump(out, sys.stdout)
`

func runPython(t *testing.T, kind string, part []byte) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Missing(t, "python3 is not installed")
	}
	path := filepath.Join(t.TempDir(), "part")
	if err := os.WriteFile(path, part, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", pythonReader, kind, path).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("python3 %s: %v\n%s", kind, err, stderr)
	}
	var recs []string
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("python3 output %q: %v", out, err)
	}
	return recs
}

func TestServedPartsReadWithPythonsStandardLibrary(t *testing.T) {
	for _, c := range seamCases(t) {
		kind := c.f.Name()
		switch kind {
		case "csv", "jsonl", "wds", "npy":
		default:
			continue
		}
		t.Run(kind, func(t *testing.T) {
			// What Python reads in the source files, against what it reads
			// in a shuffled part of them.
			var want []string
			for _, data := range c.files {
				recs := runPython(t, kind, data)
				switch kind {
				case "csv":
					recs = recs[1:] // each file's header
				case "npy":
					recs = recs[2:] // descr and shape
				}
				want = append(want, recs...)
			}
			p, _ := part(t, c.f, c.files, 11)
			got := runPython(t, kind, p)
			switch kind {
			case "csv":
				if got[0] != "id\x00v" {
					t.Fatalf("part header %q", got[0])
				}
				got = got[1:]
			case "npy":
				if got[0] != "<i4" || got[1] != "[31, 2]" {
					t.Fatalf("part is %s %s, want <i4 [31, 2]", got[0], got[1])
				}
				got = got[2:]
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("python reads %d records in the part, %d in the sources, or they differ:\n%q\n%q", len(got), len(want), got, want)
			}
		})
	}
}
