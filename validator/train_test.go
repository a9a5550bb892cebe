package validator

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
)

// A rec is one labelled feature vector.
type rec struct {
	label int
	x     []float32
}

var testDecoder = ExampleDecoder{Label: "label", Features: "features"}

// stream returns the records framed as a TFRecord stream, with the
// features of testDecoder.
func stream(recs []rec) []byte {
	var b tfexample.Builder
	var out []byte
	for _, r := range recs {
		b.Reset()
		b.Int64("label", int64(r.label))
		b.Float("features", r.x...)
		out = formats.AppendFrame(out, b.AppendTo(nil))
	}
	return out
}

// separable returns n records of 2 features that a linear model separates
// with a margin: binary ones split by a line, or 3 classes in 3 clusters.
func separable(n, classes int, seed uint64) []rec {
	rng := rand.New(rand.NewPCG(seed, 0))
	var recs []rec
	for len(recs) < n {
		x0, x1 := 4*rng.Float64()-2, 4*rng.Float64()-2
		var label int
		if classes == 2 {
			s := x0 - 2*x1 + 0.5
			if math.Abs(s) < 0.5 {
				continue
			}
			if s > 0 {
				label = 1
			}
		} else {
			label = rng.IntN(classes)
			angle := 2 * math.Pi * float64(label) / float64(classes)
			x0, x1 = 3*math.Cos(angle)+x0/2, 3*math.Sin(angle)+x1/2
		}
		recs = append(recs, rec{label, []float32{float32(x0), float32(x1)}})
	}
	return recs
}

func testSetOf(recs []rec) *TestSet {
	ts := &TestSet{Dim: len(recs[0].x)}
	for _, r := range recs {
		ts.X = append(ts.X, r.x...)
		ts.Labels = append(ts.Labels, r.label)
	}
	return ts
}

func newTrainer(t *testing.T, model string, dim, classes int, lr float64, batch int) *Trainer {
	t.Helper()
	m, err := NewModel(model, dim, classes)
	if err != nil {
		t.Fatal(err)
	}
	return &Trainer{Model: m, Decoder: testDecoder, LR: lr, Batch: batch}
}

func TestEachModelLearnsSeparableData(t *testing.T) {
	for _, model := range []struct {
		name    string
		classes int
	}{{Logistic, 2}, {SVM, 2}, {Softmax, 3}} {
		for _, batch := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/batch=%d", model.name, batch), func(t *testing.T) {
				data := stream(separable(2000, model.classes, 1))
				test := testSetOf(separable(500, model.classes, 2))
				tr := newTrainer(t, model.name, 2, model.classes, 0.1, batch)
				loss0, _, err := tr.Model.Evaluate(test)
				if err != nil {
					t.Fatal(err)
				}
				var losses []float64
				for e := range 5 {
					st, err := tr.TrainEpoch(context.Background(), e, bytes.NewReader(data))
					if err != nil {
						t.Fatal(err)
					}
					if st.Records != 2000 {
						t.Fatalf("epoch %d read %d records, want 2000", e, st.Records)
					}
					losses = append(losses, st.TrainLoss)
				}
				loss, acc, err := tr.Model.Evaluate(test)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("training losses %.4f; test loss %.4f -> %.4f, accuracy %.3f", losses, loss0, loss, acc)
				if losses[4] >= losses[0] {
					t.Errorf("training loss did not decrease: %.4f", losses)
				}
				if loss >= loss0/2 {
					t.Errorf("test loss went from %.4f to %.4f, want it at least halved", loss0, loss)
				}
				if acc < 0.97 {
					t.Errorf("test accuracy %.3f on separable data, want at least 0.97", acc)
				}
			})
		}
	}
}

func TestSameConfigurationGivesSameWeights(t *testing.T) {
	data := stream(separable(500, 3, 4))
	var weights [2][]float64
	for i := range weights {
		tr := newTrainer(t, Softmax, 2, 3, 0.05, 4)
		tr.L2 = 1e-3
		for e := range 3 {
			if _, err := tr.TrainEpoch(context.Background(), e, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
		}
		weights[i] = append(tr.Model.W, tr.Model.B...)
	}
	if !slices.Equal(weights[0], weights[1]) {
		t.Errorf("two runs give different weights: %v and %v", weights[0], weights[1])
	}
}

func TestMiniBatchUpdateUsesTheMeanGradient(t *testing.T) {
	recs := []rec{{1, []float32{1, 2}}, {0, []float32{3, -1}}, {1, []float32{-2, 0.5}}}
	tr := newTrainer(t, Logistic, 2, 2, 0.3, len(recs))
	if _, err := tr.TrainEpoch(context.Background(), 0, bytes.NewReader(stream(recs))); err != nil {
		t.Fatal(err)
	}
	// At zero weights σ(0) = 1/2, so each record's score gradient is 1/2 - label.
	var wantW [2]float64
	var wantB float64
	for _, r := range recs {
		g := 0.5 - float64(r.label)
		wantW[0] -= 0.3 * g * float64(r.x[0]) / 3
		wantW[1] -= 0.3 * g * float64(r.x[1]) / 3
		wantB -= 0.3 * g / 3
	}
	for i, w := range append(tr.Model.W, tr.Model.B[0]) {
		want := append(wantW[:], wantB)[i]
		if math.Abs(w-want) > 1e-12 {
			t.Errorf("parameter %d = %v after one batch, want %v", i, w, want)
		}
	}
}

func TestPlainSGDUpdatesAfterEveryRecord(t *testing.T) {
	recs := []rec{{1, []float32{1, 0}}, {1, []float32{1, 0}}}
	tr := newTrainer(t, Logistic, 2, 2, 1, 1)
	st, err := tr.TrainEpoch(context.Background(), 0, bytes.NewReader(stream(recs)))
	if err != nil {
		t.Fatal(err)
	}
	// The first record sees zero weights (loss log 2); the second sees the
	// weights it updated, so its loss is lower.
	first := math.Log(2)
	w := 0.5 // after the first update: w = b = 0.5, score 1
	second := math.Log1p(math.Exp(-2 * w))
	if want := (first + second) / 2; math.Abs(st.TrainLoss-want) > 1e-12 {
		t.Errorf("mean loss %v, want %v", st.TrainLoss, want)
	}
}

func TestL2ShrinksTheWeights(t *testing.T) {
	data := stream(separable(1000, 2, 5))
	norm := func(l2 float64) float64 {
		tr := newTrainer(t, Logistic, 2, 2, 0.1, 1)
		tr.L2 = l2
		for e := range 3 {
			if _, err := tr.TrainEpoch(context.Background(), e, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
		}
		var s float64
		for _, w := range tr.Model.W {
			s += w * w
		}
		return math.Sqrt(s)
	}
	if plain, reg := norm(0), norm(0.05); reg >= plain*0.8 {
		t.Errorf("weight norm %.3f with L2, %.3f without; want L2 to shrink it", reg, plain)
	}
}

func TestLearningRateDecaysPerEpoch(t *testing.T) {
	tests := []struct {
		decay float64
		epoch int
		want  float64
	}{
		{0, 0, 0.1}, {0, 1, 0.095}, {0, 10, 0.1 * math.Pow(0.95, 10)}, {0.5, 2, 0.025}, {1, 7, 0.1},
	}
	for _, tt := range tests {
		tr := Trainer{LR: 0.1, Decay: tt.decay}
		if got := tr.LearningRate(tt.epoch); math.Abs(got-tt.want) > 1e-15 {
			t.Errorf("decay %v, epoch %d: rate %v, want %v", tt.decay, tt.epoch, got, tt.want)
		}
	}
}

func TestTrainerRejectsBadSettings(t *testing.T) {
	m, _ := NewModel(Logistic, 2, 2)
	tests := []struct {
		name string
		tr   Trainer
		want string
	}{
		{"no model", Trainer{Decoder: testDecoder, LR: 0.1}, "no Model"},
		{"no decoder", Trainer{Model: m, LR: 0.1}, "has no Decoder"},
		{"zero rate", Trainer{Model: m, Decoder: testDecoder}, "LR must be a positive number, got 0"},
		{"NaN rate", Trainer{Model: m, Decoder: testDecoder, LR: math.NaN()}, "LR must be a positive number"},
		{"growing rate", Trainer{Model: m, Decoder: testDecoder, LR: 0.1, Decay: 1.5}, "Decay must be in (0, 1]"},
		{"negative L2", Trainer{Model: m, Decoder: testDecoder, LR: 0.1, L2: -1}, "L2 must be a non-negative number"},
		{"negative batch", Trainer{Model: m, Decoder: testDecoder, LR: 0.1, Batch: -2}, "Batch must not be negative"},
	}
	for _, tt := range tests {
		if _, err := tt.tr.TrainEpoch(context.Background(), 0, bytes.NewReader(nil)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func TestBadRecordsInTheStreamAreErrors(t *testing.T) {
	good := stream(separable(5, 2, 6))
	starts, err := formats.Split(good, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	third := int(starts[2]) // records 0 and 1 are fine
	corrupt := func(at int) []byte {
		b := slices.Clone(good)
		b[at] ^= 0x40
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		corrupt bool // a *formats.CorruptError
		want    string
	}{
		{"data CRC mismatch", corrupt(third + formats.HeaderLen + 3), true,
			fmt.Sprintf("validator: epoch 2: record 2: corrupt record at offset %d: data CRC mismatch", third)},
		{"stored data CRC changed", corrupt(int(starts[3]) - 1), true,
			fmt.Sprintf("record 2: corrupt record at offset %d: data CRC mismatch", third)},
		{"length CRC mismatch", corrupt(third + 1), true,
			fmt.Sprintf("record 2: corrupt record at offset %d: length CRC mismatch", third)},
		{"truncated data", good[:starts[3]-2], true,
			fmt.Sprintf("record 2: corrupt record at offset %d: truncated frame", third)},
		{"truncated header", good[:third+5], true,
			fmt.Sprintf("record 2: corrupt record at offset %d: truncated frame header", third)},
		{"garbage after the records", append(slices.Clone(good), "garbage tail!"...), true,
			"record 5: corrupt record at offset"},
		{"label out of range", stream([]rec{{0, []float32{1, 1}}, {2, []float32{1, 1}}}), false,
			"validator: epoch 2: record 1: label 2 is out of range: logistic is a binary model and takes labels 0 and 1"},
		{"wrong number of features", stream([]rec{{0, []float32{1, 1}}, {1, []float32{1, 1, 1}}}), false,
			"validator: epoch 2: record 1: 3 features, the model has 2"},
		{"record is not an Example", formats.AppendFrame(slices.Clone(good), []byte{0xff}), false,
			"validator: epoch 2: record 5: tfexample:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTrainer(t, Logistic, 2, 2, 0.1, 1)
			_, err := tr.TrainEpoch(context.Background(), 2, bytes.NewReader(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
			var ce *formats.CorruptError
			if errors.As(err, &ce) != tt.corrupt {
				t.Errorf("err = %v; is a CorruptError: %v, want %v", err, !tt.corrupt, tt.corrupt)
			}
		})
	}
}

// failingReader returns its data, then err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadErrorsArePassedOn(t *testing.T) {
	good := stream(separable(3, 2, 6))
	eio := errors.New("input/output error")
	tr := newTrainer(t, Logistic, 2, 2, 0.1, 1)
	_, err := tr.TrainEpoch(context.Background(), 0, &failingReader{good[:len(good)-7], eio})
	if !errors.Is(err, eio) || !strings.Contains(err.Error(), "record 2: reading at offset") {
		t.Errorf("err = %v, want the read error with the record and offset", err)
	}
}

func TestCanceledEpochStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tr := newTrainer(t, Logistic, 2, 2, 0.1, 1)
	if _, err := tr.TrainEpoch(ctx, 0, bytes.NewReader(stream(separable(10, 2, 1)))); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestTrainingDoesNotAllocatePerRecord(t *testing.T) {
	for _, batch := range []int{1, 16} {
		small, large := stream(separable(500, 3, 1)), stream(separable(5000, 3, 1))
		tr := newTrainer(t, Softmax, 2, 3, 0.01, batch)
		allocs := func(data []byte) float64 {
			r := bytes.NewReader(data)
			return testing.AllocsPerRun(5, func() {
				r.Reset(data)
				if _, err := tr.TrainEpoch(context.Background(), 0, r); err != nil {
					t.Fatal(err)
				}
			})
		}
		if a, b := allocs(small), allocs(large); b > a || b > 5 {
			t.Errorf("batch %d: %v allocations for 500 records, %v for 5000; want a few, not growing", batch, a, b)
		}
	}
}

// synthetic writes a shuffled synthetic dataset of 4 classes and 32
// features (6000 records in 6 files) and returns the 5000 records of its
// first 5 files as frames, in file order, and a test set from the last.
func synthetic(t *testing.T) (train [][]byte, test *TestSet) {
	t.Helper()
	s := datagen.Synthetic{Records: 6000, Features: 32, Classes: 4, Files: 6, Seed: 1}
	sum, err := s.Write(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range sum.Files[:5] {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		starts, err := formats.Split(b, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range starts {
			end := int64(len(b))
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			train = append(train, b[s:end])
		}
	}
	test, err = LoadTestSet(ExampleDecoder{datagen.LabelFeature, datagen.ValueFeature}, sum.Files[5])
	if err != nil {
		t.Fatal(err)
	}
	return train, test
}

// trainSoftmax trains softmax regression on the concatenated frames for
// the given epochs, the same stream every epoch, and returns the test
// accuracy after each.
func trainSoftmax(t *testing.T, frames [][]byte, test *TestSet, epochs int) []float64 {
	t.Helper()
	m, err := NewModel(Softmax, test.Dim, 4)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trainer{Model: m, Decoder: ExampleDecoder{datagen.LabelFeature, datagen.ValueFeature}, LR: 0.05, Batch: 1}
	data := bytes.Join(frames, nil)
	run, err := tr.Train(context.Background(), "test", epochs, func(int) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, test)
	if err != nil {
		t.Fatal(err)
	}
	var accs []float64
	for _, e := range run.Epochs {
		accs = append(accs, e.TestAcc)
	}
	return accs
}

func TestSoftmaxOnShuffledSyntheticDataPassesEightyPercent(t *testing.T) {
	train, test := synthetic(t)
	if len(train) != 5000 || test.Len() != 1000 || test.Dim != 32 || test.Classes() != 4 {
		t.Fatalf("%d training records, test set of %d records of %d features in %d classes", len(train), test.Len(), test.Dim, test.Classes())
	}
	accs := trainSoftmax(t, train, test, 5)
	t.Logf("test accuracy per epoch: %.3f", accs)
	if accs[4] <= 0.80 {
		t.Errorf("test accuracy after 5 epochs %.3f, want more than 0.80", accs[4])
	}
}

func TestClusteredOrderTrainsClearlyWorseThanShuffled(t *testing.T) {
	// The phenomenon corgifs exists for: SGD reading a dataset sorted by
	// label, sequentially, keeps forgetting the earlier classes.
	train, test := synthetic(t)
	clustered := slices.Clone(train)
	slices.SortStableFunc(clustered, func(a, b []byte) int { return cmp.Compare(labelOf(t, a), labelOf(t, b)) })
	shuffledAcc := trainSoftmax(t, train, test, 5)
	clusteredAcc := trainSoftmax(t, clustered, test, 5)
	t.Logf("test accuracy per epoch: shuffled %.3f, clustered %.3f", shuffledAcc, clusteredAcc)
	if gap := shuffledAcc[4] - clusteredAcc[4]; gap < 0.2 {
		t.Errorf("after 5 epochs the shuffled order reaches %.3f and the clustered one %.3f; want a gap of at least 0.2", shuffledAcc[4], clusteredAcc[4])
	}
}

func labelOf(t *testing.T, frame []byte) int {
	t.Helper()
	label, _, err := ExampleDecoder{datagen.LabelFeature, datagen.ValueFeature}.Decode(frame, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return label
}

func TestTrainRecordsEveryEpoch(t *testing.T) {
	data := stream(separable(300, 2, 7))
	test := testSetOf(separable(100, 2, 8))
	tr := newTrainer(t, SVM, 2, 2, 0.1, 1)
	var opened, closed []int
	run, err := tr.Train(context.Background(), "shuffle", 4, func(e int) (io.ReadCloser, error) {
		opened = append(opened, e)
		return closer{bytes.NewReader(data), func() { closed = append(closed, e) }}, nil
	}, test)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(opened, want) || !slices.Equal(closed, want) {
		t.Errorf("opened %v, closed %v; want each of %v", opened, closed, want)
	}
	if run.Strategy != "shuffle" || len(run.Epochs) != 4 {
		t.Fatalf("run %+v; want 4 epochs of strategy shuffle", run)
	}
	for i, e := range run.Epochs {
		if e.Epoch != i || e.TestAcc <= 0.5 || e.TrainAcc <= 0.5 || e.TrainLoss <= 0 || e.Seconds <= 0 {
			t.Errorf("epoch %d: %+v", i, e)
		}
	}
	_, err = tr.Train(context.Background(), "broken", 2, func(e int) (io.ReadCloser, error) {
		return nil, errors.New("no such part")
	}, test)
	if err == nil || !strings.Contains(err.Error(), "broken: opening epoch 0: no such part") {
		t.Errorf("err = %v, want the open error", err)
	}
}

type closer struct {
	io.Reader
	close func()
}

func (c closer) Close() error { c.close(); return nil }

func TestLoadTestSetReadsEveryFile(t *testing.T) {
	dir := t.TempDir()
	a, b := separable(30, 3, 1), separable(20, 3, 2)
	for name, recs := range map[string][]rec{"a.tfrecord": a, "b.tfrecord": b} {
		if err := os.WriteFile(filepath.Join(dir, name), stream(recs), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := LoadTestSet(testDecoder, filepath.Join(dir, "a.tfrecord"), filepath.Join(dir, "b.tfrecord"))
	if err != nil {
		t.Fatal(err)
	}
	want := testSetOf(append(a, b...))
	if ts.Dim != 2 || ts.Len() != 50 || !slices.Equal(ts.X, want.X) || !slices.Equal(ts.Labels, want.Labels) || ts.Classes() != 3 {
		t.Errorf("test set of %d records of %d features does not hold the files' records", ts.Len(), ts.Dim)
	}
	if got := ts.Row(31); !slices.Equal(got, b[1].x) {
		t.Errorf("row 31 = %v, want %v", got, b[1].x)
	}

	bad := filepath.Join(dir, "bad.tfrecord")
	if err := os.WriteFile(bad, stream([]rec{{0, []float32{1, 2}}, {1, []float32{1, 2}}, {1, []float32{3}}}), 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = LoadTestSet(testDecoder, filepath.Join(dir, "a.tfrecord"), bad)
	if want := fmt.Sprintf("validator: test set %s: record 2: 1 features, the first record has 2", bad); err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
	_, err = LoadTestSet(testDecoder, filepath.Join(dir, "missing.tfrecord"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want a not-exist error", err)
	}
}
