package datagen

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
)

// rec is a decoded record.
// rec is a decoded record: a synthetic one has values, a Fashion-MNIST one
// an image.
type rec struct {
	label, id int
	values    []float32
	image     []byte
	payload   []byte
}

// write writes s into a new temporary directory.
func write(t *testing.T, s Synthetic) Summary {
	t.Helper()
	sum, err := s.Write(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// readFiles re-scans every file of sum with formats.Scanner, checking
// every CRC, and decodes its records.
func readFiles(t *testing.T, sum Summary) [][]rec {
	t.Helper()
	var files [][]rec
	for _, path := range sum.Files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		var recs []rec
		sc := formats.NewScanner(f, 0, st.Size())
		for sc.Next() {
			frame := make([]byte, sc.Record().Len)
			if _, err := f.ReadAt(frame, sc.Record().Offset); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, decode(t, formats.Payload(frame)))
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if sc.Offset() != st.Size() {
			t.Fatalf("%s: scan stopped at %d of %d bytes", path, sc.Offset(), st.Size())
		}
		files = append(files, recs)
	}
	return files
}

func decode(t *testing.T, payload []byte) rec {
	t.Helper()
	r := rec{label: -1, id: -1, payload: payload}
	n := 0
	err := tfexample.Features(payload, func(name []byte, f tfexample.Feature) error {
		n++
		switch string(name) {
		case LabelFeature, IDFeature:
			v, err := f.AppendInt64s(nil)
			if err != nil || len(v) != 1 {
				return fmt.Errorf("%s = %v, %v; want one int64", name, v, err)
			}
			if string(name) == LabelFeature {
				r.label = int(v[0])
			} else {
				r.id = int(v[0])
			}
		case ValueFeature:
			var err error
			r.values, err = f.AppendFloats(nil)
			return err
		case ImageFeature:
			v, err := f.AppendBytes(nil)
			if err != nil || len(v) != 1 {
				return fmt.Errorf("%s = %d values, %v; want one bytes value", name, len(v), err)
			}
			r.image = v[0]
		default:
			return fmt.Errorf("unexpected feature %q", name)
		}
		return nil
	})
	if err != nil || n != 3 || r.label < 0 || r.id < 0 || (r.values == nil) == (r.image == nil) {
		t.Fatalf("bad record (%d features, %+v): %v", n, r, err)
	}
	return r
}

func all(files [][]rec) []rec { return slices.Concat(files...) }

// hash returns the SHA-256 of the names and contents of the files of sum.
func hash(t *testing.T, sum Summary) string {
	t.Helper()
	h := sha256.New()
	for _, path := range sum.Files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(path), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestEveryFileRescansCleanly(t *testing.T) {
	s := Synthetic{Records: 1000, Features: 8, Classes: 3, Files: 3, Seed: 7}
	sum := write(t, s)
	files := readFiles(t, sum)
	var size int64
	for i, path := range sum.Files {
		if got, want := filepath.Base(path), fmt.Sprintf("data-%05d-of-00003.tfrecord", i); got != want {
			t.Errorf("file %d is %s, want %s", i, got, want)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		size += st.Size()
	}
	if sum.Records != 1000 || sum.Bytes != size || len(files) != 3 {
		t.Errorf("summary %+v; want 1000 records, %d bytes, 3 files", sum, size)
	}
	for _, r := range all(files) {
		if len(r.values) != s.Features || r.label >= s.Classes {
			t.Fatalf("record %+v does not fit %+v", r, s)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(sum.Files[0]))
	if err != nil || len(entries) != 3 {
		t.Errorf("directory holds %d entries (%v), want just the 3 files", len(entries), err)
	}
}

func TestFilesSplitIntoNearEqualRuns(t *testing.T) {
	for _, clustered := range []bool{true, false} {
		s := Synthetic{Records: 10, Features: 1, Classes: 2, Files: 3, Clustered: clustered}
		var got []int
		for _, f := range readFiles(t, write(t, s)) {
			got = append(got, len(f))
		}
		if want := []int{4, 3, 3}; !slices.Equal(got, want) {
			t.Errorf("clustered=%v: records per file %v, want %v", clustered, got, want)
		}
	}
}

func TestClassesAreBalanced(t *testing.T) {
	tests := []struct{ records, classes int }{
		{12, 4}, {13, 4}, {15, 4}, {100, 7}, {3, 5},
	}
	for _, tt := range tests {
		for _, clustered := range []bool{true, false} {
			t.Run(fmt.Sprintf("%d/%d/clustered=%v", tt.records, tt.classes, clustered), func(t *testing.T) {
				s := Synthetic{Records: tt.records, Features: 2, Classes: tt.classes, Files: 1, Clustered: clustered}
				counts := make([]int, tt.classes)
				for _, r := range all(readFiles(t, write(t, s))) {
					counts[r.label]++
				}
				if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 1 {
					t.Errorf("class counts %v differ by more than one", counts)
				}
			})
		}
	}
}

func TestIDsAreAPermutationAndMatchLabels(t *testing.T) {
	for _, clustered := range []bool{true, false} {
		s := Synthetic{Records: 5000, Features: 2, Classes: 3, Files: 4, Clustered: clustered, Seed: 3}
		recs := all(readFiles(t, write(t, s)))
		seen := make([]bool, s.Records)
		for _, r := range recs {
			if r.id >= s.Records || seen[r.id] {
				t.Fatalf("clustered=%v: id %d out of range or repeated", clustered, r.id)
			}
			seen[r.id] = true
			if r.label != s.Label(r.id) {
				t.Fatalf("clustered=%v: id %d has label %d, Label says %d", clustered, r.id, r.label, s.Label(r.id))
			}
		}
		if len(recs) != s.Records {
			t.Errorf("clustered=%v: %d records, want %d", clustered, len(recs), s.Records)
		}
	}
}

func TestClusteredOrderIsSortedByLabel(t *testing.T) {
	s := Synthetic{Records: 1001, Features: 4, Classes: 10, Files: 3, Clustered: true}
	for i, r := range all(readFiles(t, write(t, s))) {
		if r.id != i {
			t.Fatalf("record %d has id %d; clustered records are in id order", i, r.id)
		}
		if i > 0 && s.Label(i) < s.Label(i-1) {
			t.Fatalf("label decreases at record %d", i)
		}
	}
}

func TestShuffledOrderIsNotSorted(t *testing.T) {
	s := Synthetic{Records: 1000, Features: 4, Classes: 4, Files: 2}
	recs := all(readFiles(t, write(t, s)))
	if slices.IsSortedFunc(recs, func(a, b rec) int { return a.label - b.label }) {
		t.Fatal("shuffled records are sorted by label")
	}
	// In a uniform shuffle each record lands next to one of the same class
	// about a quarter of the time; sorted runs would make it nearly always.
	same := 0
	for i := 1; i < len(recs); i++ {
		if recs[i].label == recs[i-1].label {
			same++
		}
	}
	if same < 150 || same > 350 {
		t.Errorf("%d of %d neighbours share a label, want about 250", same, len(recs)-1)
	}
}

func TestRecordsDoNotDependOnOrder(t *testing.T) {
	s := Synthetic{Records: 300, Features: 5, Classes: 3, Files: 2, Seed: 11}
	shuffled := all(readFiles(t, write(t, s)))
	s.Clustered = true
	byID := all(readFiles(t, write(t, s)))
	for _, r := range shuffled {
		if string(r.payload) != string(byID[r.id].payload) {
			t.Fatalf("record %d differs between shuffled and clustered datasets", r.id)
		}
	}
}

func TestWriteIsDeterministic(t *testing.T) {
	s := Synthetic{Records: 2000, Features: 16, Classes: 4, Files: 3, Seed: 42}
	first, second := hash(t, write(t, s)), hash(t, write(t, s))
	if first != second {
		t.Errorf("two runs differ: %s vs %s", first, second)
	}
	s.Seed++
	if other := hash(t, write(t, s)); other == first {
		t.Error("a different seed gives the same dataset")
	}
}

func TestGoldenSHA256(t *testing.T) {
	// These pin the exact bytes: generator, layout and encoding. A change
	// here means existing datasets can no longer be regenerated.
	tests := []struct {
		s    Synthetic
		want string
	}{
		{Synthetic{Records: 10, Features: 3, Classes: 2, Files: 2, Seed: 1}, "95a175bc9718f33ac6ae8e992e31701ca4967808ccb0ec16ffc5c6573abede4b"},
		{Synthetic{Records: 10, Features: 3, Classes: 2, Files: 2, Seed: 1, Clustered: true}, "89fed4ce3019d9d20cbfd59d62b74d694e5695a2b099708eed46e49fd90b2fdc"},
	}
	for _, tt := range tests {
		if got := hash(t, write(t, tt.s)); got != tt.want {
			t.Errorf("%+v: SHA-256 %s, want %s", tt.s, got, tt.want)
		}
	}
}

func TestLinearClassifierIsGoodButNotPerfect(t *testing.T) {
	s := Synthetic{Records: 10000, Features: 32, Classes: 4, Files: 1, Seed: 5}
	recs := all(readFiles(t, write(t, s)))
	train, test := recs[:8000], recs[8000:]

	// Softmax regression by plain SGD over the (shuffled) training records.
	d, c := s.Features, s.Classes
	w := make([]float64, c*(d+1)) // per class: d weights and a bias
	logits := make([]float64, c)
	predict := func(x []float32) int {
		for k := range c {
			row := w[k*(d+1) : (k+1)*(d+1)]
			z := row[d]
			for j, v := range x {
				z += row[j] * float64(v)
			}
			logits[k] = z
		}
		return argmax(logits)
	}
	const rate = 0.01
	for range 5 {
		for _, r := range train {
			predict(r.values)
			m := slices.Max(logits)
			var total float64
			for k := range logits {
				logits[k] = math.Exp(logits[k] - m)
				total += logits[k]
			}
			for k := range c {
				g := logits[k] / total
				if k == r.label {
					g--
				}
				row := w[k*(d+1) : (k+1)*(d+1)]
				for j, v := range r.values {
					row[j] -= rate * g * float64(v)
				}
				row[d] -= rate * g
			}
		}
	}
	right := 0
	for _, r := range test {
		if predict(r.values) == r.label {
			right++
		}
	}
	acc := float64(right) / float64(len(test))
	t.Logf("held-out accuracy %.3f", acc)
	if acc < 0.80 || acc > 0.95 {
		t.Errorf("held-out accuracy %.3f, want between 0.80 and 0.95", acc)
	}
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func TestProgressGrowsToTheTotal(t *testing.T) {
	s := Synthetic{Records: 20000, Features: 4, Classes: 2, Files: 2}
	var calls []int64
	sum, err := s.Write(context.Background(), t.TempDir(), func(n int64) { calls = append(calls, n) })
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 4 || !slices.IsSorted(calls) || calls[len(calls)-1] != sum.Bytes {
		t.Errorf("progress calls %v; want several, non-decreasing, ending at %d", calls, sum.Bytes)
	}
}

func TestCancelLeavesNoFiles(t *testing.T) {
	s := Synthetic{Records: 20000, Features: 4, Classes: 2, Files: 2}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	_, err := s.Write(ctx, dir, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("canceled write left %d files", len(entries))
	}
}

func TestInvalidOptions(t *testing.T) {
	ok := Synthetic{Records: 10, Features: 2, Classes: 2, Files: 1}
	tests := []struct {
		name   string
		modify func(*Synthetic)
		want   string
	}{
		{"no records", func(s *Synthetic) { s.Records = 0 }, "Records must be positive"},
		{"negative records", func(s *Synthetic) { s.Records = -1 }, "Records must be positive"},
		{"no features", func(s *Synthetic) { s.Features = 0 }, "Features must be positive"},
		{"one class", func(s *Synthetic) { s.Classes = 1 }, "Classes must be at least 2"},
		{"no files", func(s *Synthetic) { s.Files = 0 }, "Files must be at least 1"},
		{"more files than records", func(s *Synthetic) { s.Files = 11 }, "must not exceed Records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.modify(&s)
			dir := filepath.Join(t.TempDir(), "out")
			_, err := s.Write(context.Background(), dir, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
			if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("invalid options created the output directory")
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestUint64nIsInRangeAndCoversIt(t *testing.T) {
	src := newGenerator(Synthetic{Features: 1, Classes: 2}).src
	for _, n := range []uint64{1, 2, 3, 7, 1 << 40, math.MaxUint64} {
		for range 1000 {
			if v := uint64n(src, n); v >= n {
				t.Fatalf("uint64n(%d) = %d", n, v)
			}
		}
	}
	var seen [5]int
	for range 5000 {
		seen[uint64n(src, 5)]++
	}
	for v, k := range seen {
		if k < 850 || k > 1150 {
			t.Errorf("value %d drawn %d times of 5000, want about 1000", v, k)
		}
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	g := newGenerator(Synthetic{Records: 100, Features: 32, Classes: 4})
	for _, format := range Formats() {
		if format == FormatWDS {
			continue // archive/tar allocates per member
		}
		enc, err := newEncoder(format, 32, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.begin(io.Discard, 100); err != nil {
			t.Fatal(err)
		}
		enc.write(g.record(0)) // grow the buffers
		id := 0
		if n := testing.AllocsPerRun(100, func() { enc.write(g.record(id % 100)); id++ }); n != 0 {
			t.Errorf("%s: %v allocations per record, want 0", format, n)
		}
	}
}

func TestSyntheticFirstIDGivesHeldOutRecords(t *testing.T) {
	ctx := t.Context()
	train := Synthetic{Records: 400, Features: 4, Classes: 4, Clustered: true, Files: 1, Seed: 9}
	test := Synthetic{Records: 100, Features: 4, Classes: 4, Files: 1, Seed: 9, FirstID: train.Records}
	payloads := func(s Synthetic) map[string]bool {
		dir := t.TempDir()
		sum, err := s.Write(ctx, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(sum.Files[0])
		if err != nil {
			t.Fatal(err)
		}
		starts, err := formats.Split(b, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, st := range starts {
			m[string(formats.Payload(b[st:]))] = true
		}
		return m
	}
	a, b := payloads(train), payloads(test)
	if len(b) != 100 {
		t.Fatalf("%d distinct test records, want 100", len(b))
	}
	for p := range b {
		if a[p] {
			t.Fatal("a record of the held-out set is also in the training set")
		}
	}
}

// TestNoiseScalesTheSpreadAroundTheClassCentersAndOneIsTheDefault: Noise 1
// writes the bytes of the default, and Noise 3 the same records three
// times as far from their class centers.
func TestNoiseScalesTheSpreadAroundTheClassCentersAndOneIsTheDefault(t *testing.T) {
	s := Synthetic{Records: 400, Features: 6, Classes: 2, Files: 1, Seed: 8}
	def := write(t, s)
	s.Noise = 1
	if hash(t, def) != hash(t, write(t, s)) {
		t.Errorf("Noise 1 differs from the default")
	}
	s.Noise = 3
	one, three := all(readFiles(t, def)), all(readFiles(t, write(t, s)))
	g := newGenerator(s)
	for i, r := range three {
		center := g.centers[r.label*s.Features : (r.label+1)*s.Features]
		for d, v := range r.values {
			want := center[d] + 3*(float64(one[i].values[d])-center[d])
			if math.Abs(float64(v)-want) > 1e-4*(1+math.Abs(want)) {
				t.Fatalf("record %d feature %d: %g with Noise 3, want %g (3 times its distance from the center with Noise 1)", r.id, d, v, want)
			}
		}
	}
}
