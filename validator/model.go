package validator

import (
	"fmt"
	"math"
)

// The models that NewModel makes, by name.
const (
	Logistic = "logistic" // binary logistic regression, labels 0 and 1
	SVM      = "svm"      // binary linear SVM (hinge loss), labels 0 (as -1) and 1
	Softmax  = "softmax"  // multiclass softmax regression, labels 0 to classes-1
)

// ModelNames returns the names NewModel accepts.
func ModelNames() []string { return []string{Logistic, SVM, Softmax} }

// A Model is a linear model: Outputs rows of weights and a bias per row,
// giving one score per row, and a loss that turns the scores into a
// prediction. Binary models have one row, whose score is positive for
// label 1; softmax has one row per class.
//
// A Model holds scratch space, so it must not be used by several goroutines
// at once.
type Model struct {
	// W holds Outputs() rows of Dim() weights, row after row; B holds the
	// bias of each row.
	W, B []float64

	name    string
	dim     int
	classes int
	scores  []float64 // scratch: the scores of the last example
	grad    []float64 // scratch: d loss / d score of the last example
	sketch  []float64 // scratch: a feedback vector being sketched (Gradients)
}

// NewModel returns the model called name (see ModelNames) over dim
// features and classes classes, which must be 2 for the binary models.
//
// Its weights and biases start at zero, so the same configuration always
// starts from the same model and no seed is needed. Zero is a fine start
// for these convex losses: the gradient at zero is not zero (for softmax,
// the uniform prediction is pulled toward each record's class).
func NewModel(name string, dim, classes int) (*Model, error) {
	if dim < 1 {
		return nil, fmt.Errorf("validator: a model needs at least one feature, got %d", dim)
	}
	outputs := 1
	switch name {
	case Logistic, SVM:
		if classes != 2 {
			return nil, fmt.Errorf("validator: %s is a binary model: it needs classes = 2, got %d", name, classes)
		}
	case Softmax:
		if classes < 2 {
			return nil, fmt.Errorf("validator: softmax needs at least 2 classes, got %d", classes)
		}
		outputs = classes
	default:
		return nil, fmt.Errorf("validator: unknown model %q (want one of %v)", name, ModelNames())
	}
	return &Model{
		W:       make([]float64, outputs*dim),
		B:       make([]float64, outputs),
		name:    name,
		dim:     dim,
		classes: classes,
		scores:  make([]float64, outputs),
		grad:    make([]float64, outputs),
	}, nil
}

// Name returns the model's name, as given to NewModel.
func (m *Model) Name() string { return m.name }

// Dim returns the number of features.
func (m *Model) Dim() int { return m.dim }

// Classes returns the number of classes.
func (m *Model) Classes() int { return m.classes }

// Outputs returns the number of weight rows: 1 for binary models, Classes
// for softmax.
func (m *Model) Outputs() int { return len(m.B) }

// Predict returns the class the model gives the features x. It panics if x
// does not have Dim values.
func (m *Model) Predict(x []float32) int {
	if len(x) != m.dim {
		panic(fmt.Sprintf("validator: Predict got %d features, the model has %d", len(x), m.dim))
	}
	m.forward(x)
	return m.predicted()
}

// checkExample returns an error if x or label does not fit the model.
func (m *Model) checkExample(x []float32, label int) error {
	if len(x) != m.dim {
		return fmt.Errorf("%d features, the model has %d", len(x), m.dim)
	}
	if label < 0 || label >= m.classes {
		if m.name == Softmax {
			return fmt.Errorf("label %d is out of range: softmax with %d classes takes labels 0 to %d", label, m.classes, m.classes-1)
		}
		return fmt.Errorf("label %d is out of range: %s is a binary model and takes labels 0 and 1", label, m.name)
	}
	return nil
}

// forward sets m.scores to the scores of x, which has Dim values.
func (m *Model) forward(x []float32) {
	for k := range m.scores {
		row := m.W[k*m.dim : (k+1)*m.dim : (k+1)*m.dim]
		row = row[:len(x)]
		s := m.B[k]
		for j, v := range x {
			s += row[j] * float64(v)
		}
		m.scores[k] = s
	}
}

// predicted returns the class that m.scores predict: for binary models 1
// if the score is positive, for softmax the first class of highest score.
func (m *Model) predicted() int {
	if m.name != Softmax {
		if m.scores[0] > 0 {
			return 1
		}
		return 0
	}
	best := 0
	for k, s := range m.scores {
		if s > m.scores[best] {
			best = k
		}
	}
	return best
}

// lossGrad returns the loss of m.scores for label and whether they predict
// it, and sets m.grad to the derivative of the loss with respect to each
// score. The gradient with respect to row k of W is then m.grad[k]·x, and
// with respect to B[k] it is m.grad[k].
func (m *Model) lossGrad(label int) (loss float64, correct bool) {
	correct = m.predicted() == label
	switch m.name {
	case Logistic:
		// loss = -log σ(s) for label 1, -log(1 - σ(s)) = -log σ(-s) for 0.
		s := m.scores[0]
		if label == 1 {
			loss = softplus(-s)
		} else {
			loss = softplus(s)
		}
		m.grad[0] = sigmoid(s) - float64(label)
	case SVM:
		// loss = max(0, 1 - y·s) with y = ±1.
		y := float64(2*label - 1)
		margin := y * m.scores[0]
		loss = max(0, 1-margin)
		if margin < 1 {
			m.grad[0] = -y
		} else {
			m.grad[0] = 0
		}
	case Softmax:
		// loss = log Σ exp(s_k) - s_label; d/ds_k = p_k - [k = label].
		top := m.scores[0]
		for _, s := range m.scores {
			top = max(top, s)
		}
		var sum float64
		for k, s := range m.scores {
			e := math.Exp(s - top)
			m.grad[k] = e
			sum += e
		}
		lse := top + math.Log(sum)
		loss = lse - m.scores[label]
		for k := range m.grad {
			m.grad[k] /= sum
		}
		m.grad[label]--
	}
	return loss, correct
}

// softplus returns log(1 + e^z) without overflow.
func softplus(z float64) float64 {
	return max(z, 0) + math.Log1p(math.Exp(-math.Abs(z)))
}

// sigmoid returns 1 / (1 + e^-z) without overflow.
func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// Evaluate returns the model's mean loss and accuracy on the test set.
func (m *Model) Evaluate(ts *TestSet) (loss, acc float64, err error) {
	if ts.Len() == 0 {
		return 0, 0, fmt.Errorf("validator: the test set is empty")
	}
	if ts.Dim != m.dim {
		return 0, 0, fmt.Errorf("validator: test records have %d features, the model has %d", ts.Dim, m.dim)
	}
	right := 0
	for i, label := range ts.Labels {
		x := ts.Row(i)
		if err := m.checkExample(x, label); err != nil {
			return 0, 0, fmt.Errorf("validator: test record %d: %w", i, err)
		}
		m.forward(x)
		l, ok := m.lossGrad(label)
		loss += l
		if ok {
			right++
		}
	}
	n := float64(ts.Len())
	return loss / n, float64(right) / n, nil
}
