package validator

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestNewModelStartsAtZero(t *testing.T) {
	for _, c := range []struct {
		name             string
		classes, outputs int
	}{{Logistic, 2, 1}, {SVM, 2, 1}, {Softmax, 5, 5}} {
		m, err := NewModel(c.name, 3, c.classes)
		if err != nil {
			t.Fatal(err)
		}
		if m.Name() != c.name || m.Dim() != 3 || m.Classes() != c.classes || m.Outputs() != c.outputs || len(m.W) != 3*c.outputs || len(m.B) != c.outputs {
			t.Errorf("%s: model %+v has the wrong shape", c.name, m)
		}
		for _, w := range append(m.W, m.B...) {
			if w != 0 {
				t.Errorf("%s: initial weights %v %v, want zeros", c.name, m.W, m.B)
				break
			}
		}
	}
}

func TestNewModelRejectsBadConfigurations(t *testing.T) {
	tests := []struct {
		name         string
		dim, classes int
		want         string
	}{
		{"perceptron", 3, 2, `unknown model "perceptron" (want one of [logistic svm softmax])`},
		{Logistic, 3, 3, "logistic is a binary model: it needs classes = 2, got 3"},
		{SVM, 3, 1, "svm is a binary model"},
		{Softmax, 3, 1, "softmax needs at least 2 classes, got 1"},
		{Softmax, 0, 3, "at least one feature, got 0"},
	}
	for _, tt := range tests {
		if _, err := NewModel(tt.name, tt.dim, tt.classes); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewModel(%q, %d, %d): err = %v, want one containing %q", tt.name, tt.dim, tt.classes, err, tt.want)
		}
	}
}

// lossAt returns the loss of m on (x, label).
func lossAt(m *Model, x []float32, label int) float64 {
	m.forward(x)
	l, _ := m.lossGrad(label)
	return l
}

func TestGradientMatchesFiniteDifferences(t *testing.T) {
	const dim, h = 5, 1e-6
	for _, c := range []struct {
		name    string
		classes int
	}{{Logistic, 2}, {SVM, 2}, {Softmax, 4}} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			m, err := NewModel(c.name, dim, c.classes)
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for trial := range 40 {
				for i := range m.W {
					m.W[i] = rng.NormFloat64() * 0.7
				}
				for i := range m.B {
					m.B[i] = rng.NormFloat64() * 0.7
				}
				x := make([]float32, dim)
				for j := range x {
					x[j] = float32(rng.NormFloat64())
				}
				label := trial % c.classes
				m.forward(x)
				if c.name == SVM && math.Abs(1-float64(2*label-1)*m.scores[0]) < 1e-3 {
					continue // the hinge has no derivative at its kink
				}
				m.lossGrad(label)
				grad := append([]float64(nil), m.grad...)
				// Every parameter: each weight of each row, then each bias.
				params := []*float64{}
				analytic := []float64{}
				for k := range m.Outputs() {
					for j := range dim {
						params = append(params, &m.W[k*dim+j])
						analytic = append(analytic, grad[k]*float64(x[j]))
					}
					params = append(params, &m.B[k])
					analytic = append(analytic, grad[k])
				}
				for i, p := range params {
					saved := *p
					*p = saved + h
					up := lossAt(m, x, label)
					*p = saved - h
					down := lossAt(m, x, label)
					*p = saved
					numeric := (up - down) / (2 * h)
					if diff := math.Abs(numeric - analytic[i]); diff > 1e-6*max(1, math.Abs(numeric)) {
						t.Fatalf("trial %d, parameter %d: analytic gradient %.9f, finite difference %.9f", trial, i, analytic[i], numeric)
					}
				}
				checked++
			}
			if checked < 30 {
				t.Errorf("only %d of 40 trials were checked", checked)
			}
		})
	}
}

func TestLossesAreStableForLargeScores(t *testing.T) {
	for _, c := range []struct {
		name    string
		classes int
	}{{Logistic, 2}, {SVM, 2}, {Softmax, 3}} {
		m, err := NewModel(c.name, 1, c.classes)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []float64{-1e4, 1e4} {
			for k := range m.W {
				m.W[k] = w * float64(k+1)
			}
			for label := range c.classes {
				m.forward([]float32{1})
				l, _ := m.lossGrad(label)
				if math.IsNaN(l) || math.IsInf(l, 0) || l < 0 {
					t.Errorf("%s: weight %v, label %d: loss %v", c.name, w, label, l)
				}
				for _, g := range m.grad {
					if math.IsNaN(g) || math.IsInf(g, 0) {
						t.Errorf("%s: weight %v, label %d: gradient %v", c.name, w, label, m.grad)
					}
				}
			}
		}
	}
}

func TestEvaluateChecksTheTestSet(t *testing.T) {
	m, err := NewModel(Logistic, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ts   TestSet
		want string
	}{
		{"empty", TestSet{Dim: 2}, "the test set is empty"},
		{"wrong dimension", TestSet{Dim: 3, X: make([]float32, 3), Labels: []int{0}}, "test records have 3 features, the model has 2"},
		{"label out of range", TestSet{Dim: 2, X: make([]float32, 4), Labels: []int{1, 2}}, "test record 1: label 2 is out of range: logistic is a binary model and takes labels 0 and 1"},
	}
	for _, tt := range tests {
		if _, _, err := m.Evaluate(&tt.ts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

func TestPredictPicksTheHighestScore(t *testing.T) {
	m, err := NewModel(Softmax, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.W, []float64{1, 0, 0, 1, -1, -1})
	for _, c := range []struct {
		x    []float32
		want int
	}{{[]float32{2, 1}, 0}, {[]float32{1, 2}, 1}, {[]float32{-1, -1}, 2}} {
		if got := m.Predict(c.x); got != c.want {
			t.Errorf("Predict(%v) = %d, want %d", c.x, got, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Predict with 3 features on a 2-feature model did not panic")
		}
	}()
	m.Predict([]float32{1, 2, 3})
}
