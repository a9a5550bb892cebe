package validator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomModel returns a model of the given kind with random weights.
func randomModel(t *testing.T, name string, dim, classes int, rng *rand.Rand) *Model {
	t.Helper()
	m, err := NewModel(name, dim, classes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.W {
		m.W[i] = rng.NormFloat64()
	}
	for i := range m.B {
		m.B[i] = rng.NormFloat64()
	}
	return m
}

// TestPerExampleGradientMatchesFiniteDifferences: the feedback vector of
// logistic regression (and of a softmax small enough to be exact) is the
// gradient of the example's loss with respect to every weight, then every
// bias, as central differences of the loss find it.
func TestPerExampleGradientMatchesFiniteDifferences(t *testing.T) {
	const dim, h = 4, 1e-6
	for _, c := range []struct {
		name    string
		classes int
	}{{Logistic, 2}, {Softmax, 3}} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			m := randomModel(t, c.name, dim, c.classes, rng)
			g, err := NewGradients(m, 64, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !g.Exact() || g.Dim() != m.Outputs()*(dim+1) {
				t.Fatalf("gradients of %d values, exact %v; want %d exact", g.Dim(), g.Exact(), m.Outputs()*(dim+1))
			}
			for trial := range 5 {
				x := make([]float32, dim)
				for j := range x {
					x[j] = float32(rng.NormFloat64())
				}
				label := trial % c.classes
				v, err := g.Vector(m, x, label)
				if err != nil {
					t.Fatal(err)
				}
				// The parameters in the vector's order: weights, then biases.
				params := make([]*float64, 0, len(v))
				for i := range m.W {
					params = append(params, &m.W[i])
				}
				for i := range m.B {
					params = append(params, &m.B[i])
				}
				for i, p := range params {
					old := *p
					*p = old + h
					up := lossAt(m, x, label)
					*p = old - h
					down := lossAt(m, x, label)
					*p = old
					want := (up - down) / (2 * h)
					if math.Abs(float64(v[i])-want) > 1e-4*(1+math.Abs(want)) {
						t.Errorf("trial %d: value %d of the vector is %g, finite differences say %g", trial, i, v[i], want)
					}
				}
			}
		})
	}
}

// TestSketchIsDrawnFromItsSeed: a gradient larger than the sketch
// dimension is projected, the same seed giving the same sketch, another
// seed another; the sketch keeps inner products roughly (it is unbiased).
func TestSketchIsDrawnFromItsSeed(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := randomModel(t, Softmax, 50, 10, rng)
	x := make([]float32, 50)
	for j := range x {
		x[j] = float32(rng.NormFloat64())
	}
	sketch := func(seed uint64) []float32 {
		g, err := NewGradients(m, 16, seed)
		if err != nil {
			t.Fatal(err)
		}
		if g.Exact() || g.Dim() != 16 {
			t.Fatalf("a gradient of 510 values with sketch dimension 16: dim %d, exact %v", g.Dim(), g.Exact())
		}
		v, err := g.Vector(m, x, 3)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b, c := sketch(7), sketch(7), sketch(8)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 twice: %v and %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 give the same sketch %v", a)
	}
	exact, err := NewGradients(m, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := exact.Vector(m, x, 3)
	var norm2 float64
	for _, v := range full {
		norm2 += float64(v) * float64(v)
	}
	// The mean squared norm over seeds is the gradient's.
	var mean float64
	const seeds = 200
	for s := range uint64(seeds) {
		for _, v := range sketch(100 + s) {
			mean += float64(v) * float64(v) / seeds
		}
	}
	if math.Abs(mean-norm2) > 0.2*norm2 {
		t.Errorf("mean squared norm of the sketches %g, of the gradient %g: want within 20%%", mean, norm2)
	}
}

// feedbackLog keeps what a Trainer gives its Feedback.
type feedbackLog struct {
	dim  int
	vecs map[string][]float32 // by "epoch/part/parts"
}

func (f *feedbackLog) WritePart(epoch, part, parts, dim int, vecs []float32) error {
	if f.vecs == nil {
		f.vecs = map[string][]float32{}
	}
	f.dim = dim
	f.vecs[fmt.Sprintf("%d/%d/%d", epoch, part, parts)] = slices.Clone(vecs)
	return nil
}

// TestFeedbackHasAVectorPerServedRecordAtTheModelThatTrainedOnIt: every
// part, also of parts of unequal length, gets one vector per record it
// served, the record's gradient at the model of its step, before the
// update.
func TestFeedbackHasAVectorPerServedRecordAtTheModelThatTrainedOnIt(t *testing.T) {
	all := separable(30, 2, 9)
	lens := []int{10, 7, 13}
	var streams [][]byte
	var parts [][]rec
	off := 0
	for _, n := range lens {
		parts = append(parts, all[off:off+n])
		streams = append(streams, stream(all[off:off+n]))
		off += n
	}
	const lr = 0.1
	tr := newTrainer(t, Logistic, 2, 2, lr, 3)
	g, err := NewGradients(tr.Model, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	var fb feedbackLog
	tr.Feedback, tr.Gradients = &fb, g
	// The first step takes the first record of every part at the initial
	// model, which is all zeros.
	zero, _ := NewModel(Logistic, 2, 2)
	if _, err := tr.TrainEpochParts(context.Background(), 0, readers(streams...)); err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		v := fb.vecs[fmt.Sprintf("0/%d/3", i)]
		if len(v) != len(p)*g.Dim() {
			t.Errorf("part %d served %d records and got %d values of feedback, want %d", i, len(p), len(v), len(p)*g.Dim())
			continue
		}
		want, _ := g.Vector(zero, p[0].x, p[0].label)
		if !slices.Equal(v[:g.Dim()], want) {
			t.Errorf("part %d: first vector %v, want the gradient at the initial model %v", i, v[:g.Dim()], want)
		}
	}
	// Part 2's last 3 records are trained on alone, one a step, the last
	// by the epoch's last update: the model before it is the final model
	// plus lr/K times the record's (exact, logistic) gradient, and the
	// vector must be the gradient at that model.
	v := fb.vecs["0/2/3"]
	got := v[len(v)-g.Dim():]
	before := &Model{W: slices.Clone(tr.Model.W), B: slices.Clone(tr.Model.B), name: Logistic, dim: 2, classes: 2,
		scores: make([]float64, 1), grad: make([]float64, 1)}
	for j := range before.W {
		before.W[j] += lr / 3 * float64(got[j])
	}
	before.B[0] += lr / 3 * float64(got[len(got)-1])
	last := parts[2][len(parts[2])-1]
	want, _ := g.Vector(before, last.x, last.label)
	for j := range want {
		if math.Abs(float64(got[j]-want[j])) > 1e-5 {
			t.Fatalf("part 2's last record (trained alone in the last step): vector %v, want the gradient at the model of its step %v", got, want)
		}
	}
}

// TestBinaryModelsGetExactGradientsWhateverTheFeatureCount: logistic
// regression and the linear SVM give the per-example gradient itself
// (features + 1 values), even when that is more than the sketch dimension;
// only softmax is sketched.
func TestBinaryModelsGetExactGradientsWhateverTheFeatureCount(t *testing.T) {
	const dim = 100
	rng := rand.New(rand.NewPCG(7, 8))
	for _, name := range []string{Logistic, SVM} {
		m := randomModel(t, name, dim, 2, rng)
		g, err := NewGradients(m, 64, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !g.Exact() || g.Dim() != dim+1 {
			t.Errorf("%s with %d features, sketch dimension 64: dim %d, exact %v; want %d exact", name, dim, g.Dim(), g.Exact(), dim+1)
		}
	}
	m := randomModel(t, Softmax, dim, 3, rng)
	g, err := NewGradients(m, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.Exact() || g.Dim() != 64 {
		t.Errorf("softmax with %d features, 3 classes, sketch dimension 64: dim %d, exact %v; want a sketch of 64", dim, g.Dim(), g.Exact())
	}
}
