package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"github.com/corgifs/corgifs/internal/testenv"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/tfexample"
)

// jsDir holds the independent TFRecord reader: tests/js/read_part.js on the
// npm package @roboflow/tfrecords, pinned in tests/js/package.json and
// package-lock.json.
const jsDir = "js"

// nodeModules installs tests/js's packages with npm ci unless they are
// there already (tests/js/node_modules, ignored by git, is the cache).
func nodeModules(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is not installed (Debian: apt-get install nodejs npm; .ci/run does): %v", tool, err)
		}
	}
	if _, err := os.Stat(filepath.Join(jsDir, "node_modules", "@roboflow", "tfrecords", "src", "tensorFlowReader.js")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = jsDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in tests/js: %v\n%s", err, out)
	}
}

type jsRecord struct {
	SHA256       string `json:"sha256"`
	Label        int64  `json:"label"`
	ID           int64  `json:"id"`
	Values       int    `json:"values"`
	ValuesSHA256 string `json:"values_sha256"`
}

// TestTfrecordsJSAcceptsEveryServedRecord reads served parts with
// @roboflow/tfrecords, a TFRecord reader written outside this project: it
// must accept every record (it checks both masked CRC32C values), and each
// record, in served order, must be the source record `corgifs order` names,
// byte for byte, with the features the source holds.
func TestTfrecordsJSAcceptsEveryServedRecord(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	fuseOK(t)
	nodeModules(t)
	src := genSynthetic(t, 3000, 16, 4, 3, "clustered")
	flags := []string{"--block-size", "16KiB", "--buffer", "10%", "--seed", "11"}
	m := startMount(t, src, append(flags, "--parts", "3")...)
	cache := t.TempDir()
	want := sortedHashes(sourceRecords(t, src))
	for _, ep := range []int{0, 1} {
		var epoch [][32]byte
		for part := range 3 {
			got := readWithJS(t, m.part(ep, part, 3))
			order := orderFrames(t, src, corgifs(t, append([]string{"order", src, "--epoch", strconv.Itoa(ep),
				"--part", strconv.Itoa(part), "--parts", "3", "--cache-dir", cache}, flags...)...))
			if len(got) != len(order) {
				t.Fatalf("epoch %d part %d: @roboflow/tfrecords read %d records, the part holds %d", ep, part, len(got), len(order))
			}
			for i, o := range order {
				payload := o.payload()
				h := sha256.Sum256(payload)
				epoch = append(epoch, h)
				if exp := sourceFields(t, payload, h); got[i] != exp {
					t.Fatalf("epoch %d part %d record %d (%s):\n@roboflow/tfrecords read %+v\nthe source record is  %+v", ep, part, i, o.line, got[i], exp)
				}
			}
		}
		if !slices.Equal(sortedHashes(epoch), want) {
			t.Fatalf("epoch %d: the parts do not hold every source record exactly once", ep)
		}
	}
}

// readWithJS runs tests/js/read_part.js on a file.
func readWithJS(t *testing.T, file string) []jsRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "read_part.js", file)
	cmd.Dir = jsDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node read_part.js %s: %v\n%s", file, err, stderr.String())
	}
	var recs []jsRecord
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var r jsRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("read_part.js printed %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// sourceFields is what read_part.js should print for a source payload.
func sourceFields(t *testing.T, payload []byte, h [32]byte) jsRecord {
	t.Helper()
	r := jsRecord{SHA256: hex.EncodeToString(h[:])}
	int64s := func(name string) int64 {
		f, ok, err := tfexample.Lookup(payload, name)
		if err != nil || !ok {
			t.Fatalf("source record has no %s: %v", name, err)
		}
		v, err := f.AppendInt64s(nil)
		if err != nil || len(v) != 1 {
			t.Fatalf("source %s: %v %v", name, v, err)
		}
		return v[0]
	}
	r.Label, r.ID = int64s("label"), int64s("id")
	f, ok, err := tfexample.Lookup(payload, "features")
	if err != nil || !ok {
		t.Fatalf("source record has no features: %v", err)
	}
	v, err := f.AppendFloats(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	vh := sha256.Sum256(b)
	r.Values, r.ValuesSHA256 = len(v), hex.EncodeToString(vh[:])
	return r
}
