package validator

import (
	"fmt"
	"math/rand/v2"
)

// Feedback receives, after every epoch, one vector per record of each
// part in the order the part served its records: the per-example gradient
// of the record (or its sketch, see Gradients), for an order server such
// as a corgifs mount with --strategy grab, cdgrab or corgipile-balance.
type Feedback interface {
	// WritePart takes the vectors of part of parts in epoch: dim values
	// per served record, one record after the other. vecs is reused
	// after the call returns.
	WritePart(epoch, part, parts, dim int, vecs []float32) error
}

// Gradients computes the feedback vector of an example: the gradient of
// its loss with respect to the model's weights and biases, at the model
// that trained on the example, before the update that used it (the
// "stale" gradient of GraB and CD-GraB, whose reference code takes the
// per-example gradients of each mini-batch at the parameters of that
// step and orders the next epoch by them). L2 regularisation is not part
// of it (the papers' per-example gradients are of the loss alone).
//
// The gradient has Outputs × (Dim + 1) values: the weights row after row,
// then the biases. A binary model's (logistic regression, linear SVM: one
// row, Dim + 1 values) is always given exactly, whatever the number of
// features: the order servers' guarantees are for the gradients
// themselves, and one row is what a feedback file of one vector per record
// costs anyway. A softmax gradient is given exactly when it has at most
// the sketch dimension's values; otherwise it is given as a seeded sparse
// random projection to the sketch dimension (a
// CountSketch: every gradient coordinate is added, with a random sign, to
// one of the dimension's buckets), whose inner products are the
// gradients' in expectation, at the cost of one pass over the gradient.
type Gradients struct {
	outputs, in int // rows, features per row
	dim         int // the vector's dimension
	// bucket and sign of every gradient coordinate, nil when exact.
	bucket []int32
	sign   []float32
}

// NewGradients returns the feedback vectors of model m: exact for a
// binary model or when its gradient has at most sketchDim values, else a
// projection to sketchDim values drawn from seed (the same seed gives the
// same projection).
func NewGradients(m *Model, sketchDim int, seed uint64) (*Gradients, error) {
	if sketchDim < 1 {
		return nil, fmt.Errorf("validator: sketch dimension %d: want at least 1", sketchDim)
	}
	g := &Gradients{outputs: m.Outputs(), in: m.Dim()}
	n := g.outputs * (g.in + 1)
	if g.outputs == 1 || n <= sketchDim {
		g.dim = n
		return g, nil
	}
	g.dim = sketchDim
	g.bucket = make([]int32, n)
	g.sign = make([]float32, n)
	// A stream of its own, so the sketch does not follow any order's draws.
	r := rand.New(rand.NewPCG(seed, 0x736b65746368))
	for i := range n {
		g.bucket[i] = int32(r.IntN(sketchDim))
		g.sign[i] = float32(1 - 2*int(r.Uint64()&1))
	}
	return g, nil
}

// Dim returns the dimension of the vectors.
func (g *Gradients) Dim() int { return g.dim }

// Exact reports whether the vectors are the gradients themselves.
func (g *Gradients) Exact() bool { return g.bucket == nil }

// appendVector appends to dst the vector of the example whose features are
// x, given m after forward and lossGrad on it (the loss gradient with
// respect to the scores is in m.grad).
func (g *Gradients) appendVector(dst []float32, m *Model, x []float32) []float32 {
	start := len(dst)
	dst = append(dst, make([]float32, g.dim)...)
	v := dst[start:]
	if g.bucket == nil {
		for k, gk := range m.grad {
			row := v[k*g.in : (k+1)*g.in]
			for j, xj := range x {
				row[j] = float32(gk * float64(xj))
			}
			v[g.outputs*g.in+k] = float32(gk)
		}
		return dst
	}
	acc := m.sketch[:g.dim]
	clear(acc)
	for k, gk := range m.grad {
		if gk == 0 {
			continue
		}
		base := k * g.in
		bucket, sign := g.bucket[base:base+len(x)], g.sign[base:base+len(x)]
		for j, xj := range x {
			if xj != 0 {
				acc[bucket[j]] += float64(sign[j]) * gk * float64(xj)
			}
		}
		b := g.outputs*g.in + k
		acc[g.bucket[b]] += float64(g.sign[b]) * gk
	}
	for i, a := range acc {
		v[i] = float32(a)
	}
	return dst
}

// Vector returns the feedback vector of the example (x, label) at the
// model m, as the Trainer computes it during training.
func (g *Gradients) Vector(m *Model, x []float32, label int) ([]float32, error) {
	if err := m.checkExample(x, label); err != nil {
		return nil, fmt.Errorf("validator: %w", err)
	}
	if g.outputs != m.Outputs() || g.in != m.Dim() {
		return nil, fmt.Errorf("validator: the gradients are of a model of %d×%d weights, not %d×%d", g.outputs, g.in, m.Outputs(), m.Dim())
	}
	m.forward(x)
	m.lossGrad(label)
	m.ensureSketch(g.dim)
	return g.appendVector(nil, m, x), nil
}

// ensureSketch makes the model's scratch for a sketch of dim values.
func (m *Model) ensureSketch(dim int) {
	if len(m.sketch) < dim {
		m.sketch = make([]float64, dim)
	}
}

// feedbackOn reports whether the Trainer collects feedback vectors.
func (t *Trainer) feedbackOn() bool { return t.Feedback != nil && t.Gradients != nil }

// record appends the feedback vector of the example just computed on m
// (forward and lossGrad done) to the part's vectors.
func (t *Trainer) record(p *part, m *Model, x []float32) {
	m.ensureSketch(t.Gradients.dim)
	p.vecs = t.Gradients.appendVector(p.vecs, m, x)
}

// writeFeedback hands the parts' vectors, one per record each served (the
// epoch trained on all of them), to Feedback.
func (t *Trainer) writeFeedback(ep *epochState) error {
	for i, p := range t.parts {
		if err := t.Feedback.WritePart(ep.epoch, i, len(t.parts), t.Gradients.dim, p.vecs); err != nil {
			return p.errorf(ep, "writing the feedback: %w", err)
		}
	}
	return nil
}
