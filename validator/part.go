package validator

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
)

// A part reads the records of one part of an epoch, a step's worth at a
// time, and holds the features of the step's records (and, with local
// SGD, its worker's model).
type part struct {
	i, k   int // part i of k, for errors
	br     *bufio.Reader
	rr     *recordReader // nil between the files of a Sequence
	paths  []string      // files of a Sequence not yet opened
	file   *os.File      // the open file of a Sequence
	path   string
	n      int64 // records read from the current stream
	eof    bool
	xs     []float32 // the features of the step's records, row after row
	labels []int

	model        *Model    // local SGD: the worker's copy
	vecs         []float32 // feedback vectors of the records served so far (Trainer.Feedback)
	gradW, gradB []float64
}

// reset starts reading r, part i of k: a stream, or the files of a
// Sequence one after the other.
func (p *part) reset(t *Trainer, r io.Reader, i, k int) {
	p.i, p.k = i, k
	p.rr, p.paths, p.file, p.path, p.n, p.eof = nil, nil, nil, "", 0, false
	p.vecs = p.vecs[:0]
	if seq, ok := r.(*Sequence); ok {
		p.paths = seq.Paths
		return
	}
	p.rr = records(&p.br, t.Decoder.Format(), r)
}

// copyModel makes the worker's model a copy of m.
func (p *part) copyModel(m *Model) {
	if p.model == nil || p.model.name != m.name || p.model.dim != m.dim || len(p.model.W) != len(m.W) {
		p.model = &Model{W: make([]float64, len(m.W)), B: make([]float64, len(m.B)), name: m.name, dim: m.dim,
			classes: m.classes, scores: make([]float64, len(m.B)), grad: make([]float64, len(m.B))}
		p.gradW, p.gradB = make([]float64, len(m.W)), make([]float64, len(m.B))
	}
	copy(p.model.W, m.W)
	copy(p.model.B, m.B)
}

func (p *part) close() {
	if p.file != nil {
		p.file.Close()
		p.file = nil
	}
}

// row returns the features of the i-th record of the step.
func (p *part) row(i, dim int) []float32 { return p.xs[i*dim : (i+1)*dim] }

// errorf returns an error of the epoch, naming the part when there are
// several, and the file of a Sequence.
func (p *part) errorf(ep *epochState, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if p.path != "" {
		err = fmt.Errorf("%w (in %s)", err, p.path)
	}
	if p.k > 1 {
		return fmt.Errorf("validator: epoch %d: part %d of %d: %w", ep.epoch, p.i, p.k, err)
	}
	return fmt.Errorf("validator: epoch %d: %w", ep.epoch, err)
}

// fill reads up to want records into xs and labels; fewer only at the end
// of the part.
func (p *part) fill(ctx context.Context, t *Trainer, ep *epochState, want int) error {
	m := t.Model
	p.xs, p.labels = p.xs[:0], p.labels[:0]
	for len(p.labels) < want && !p.eof {
		if p.rr == nil {
			if len(p.paths) == 0 {
				p.eof = true
				break
			}
			p.path, p.paths = p.paths[0], p.paths[1:]
			f, err := os.Open(p.path)
			if err != nil {
				p.path = ""
				return p.errorf(ep, "%w", err)
			}
			p.file, p.n = f, 0
			p.rr = records(&p.br, t.Decoder.Format(), f)
		}
		if ep.read%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rec, err := p.rr.Next()
		if err == io.EOF {
			p.rr = nil
			if p.file != nil {
				p.close()
				p.path = ""
				continue
			}
			p.eof = true
			break
		}
		if err != nil {
			return p.errorf(ep, "record %d: %w", p.n, p.rr.wrap(err))
		}
		if p.n == 0 {
			if err := t.Decoder.Begin(p.rr.Prologue()); err != nil {
				return p.errorf(ep, "%w", err)
			}
		}
		before := len(p.xs)
		var label int
		label, p.xs, err = t.Decoder.Decode(rec, p.n, p.xs)
		if err != nil {
			return p.errorf(ep, "%w", err)
		}
		if err := m.checkExample(p.xs[before:], label); err != nil {
			return p.errorf(ep, "record %d: %w", p.n, err)
		}
		p.labels = append(p.labels, label)
		p.n++
		ep.read++
	}
	return nil
}
