package herding

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"text/tabwriter"

	"github.com/corgifs/corgifs/grab"
)

// TrainConfig is an in-memory training run that compares orders on one
// dataset: logistic regression by mini-batch SGD on two Gaussian classes
// stored sorted by label (the clustered layout CorgiPile is made for), cut
// into blocks as a mount cuts files.
type TrainConfig struct {
	N          int     // examples
	Dim        int     // features (a bias is added)
	Block      int     // examples per block
	Buffer     float64 // share of the blocks in one CorgiPile buffer, (0, 1]
	Epochs     int
	Batch      int
	LR, Decay  float64 // learning rate of epoch e: LR·Decay^e
	Separation float64 // distance between the class means
	Seed       uint64
	Rule       grab.Rule
}

// TrainMethods are the orders compared, in the order of TrainResult.Loss:
// a random reshuffle of all examples every epoch (RR, as full), GraB from
// the previous epoch's per-example gradients (grab), CorgiPile (random
// blocks, shuffled inside buffers), and CorgiPile with every buffer's
// examples in PairBalance order of their latest gradients
// (corgipile-balance).
var TrainMethods = []string{"full (RR)", "grab", "corgipile", "corgipile-balance"}

// TrainResult holds Loss[method][epoch]: the mean training loss over all
// examples after the epoch (a full pass, not the running average).
type TrainResult struct {
	Config TrainConfig
	Loss   [][]float64
}

type dataset struct {
	x   []float32 // N × (Dim+1), the last feature 1 (bias)
	y   []float32
	dim int // Dim+1
}

func makeData(c TrainConfig) dataset {
	rng := rand.New(rand.NewPCG(c.Seed, 0x7472616e)) // "tran"
	d := c.Dim + 1
	dir := make([]float64, c.Dim)
	var norm float64
	for k := range dir {
		dir[k] = rng.NormFloat64()
		norm += dir[k] * dir[k]
	}
	norm = math.Sqrt(norm)
	ds := dataset{x: make([]float32, c.N*d), y: make([]float32, c.N), dim: d}
	for i := range c.N {
		label := 0
		if i >= c.N/2 { // sorted by label
			label = 1
		}
		sign := float64(2*label - 1)
		for k := range c.Dim {
			ds.x[i*d+k] = float32(rng.NormFloat64() + sign*c.Separation/2*dir[k]/norm)
		}
		ds.x[i*d+c.Dim] = 1
		ds.y[i] = float32(label)
	}
	return ds
}

// logistic is the model and its per-example gradients.
type logistic struct{ w []float64 }

func (m *logistic) p(x []float32) float64 {
	var z float64
	for k, v := range x {
		z += m.w[k] * float64(v)
	}
	return 1 / (1 + math.Exp(-z))
}

func (m *logistic) loss(ds dataset) float64 {
	var l float64
	n := len(ds.y)
	for i := range n {
		p := m.p(ds.x[i*ds.dim : (i+1)*ds.dim])
		p = min(max(p, 1e-12), 1-1e-12)
		if ds.y[i] == 1 {
			l -= math.Log(p)
		} else {
			l -= math.Log(1 - p)
		}
	}
	return l / float64(n)
}

// epoch trains one pass in order, in mini-batches, and writes every
// example's gradient (at the weights of its batch) to grads[pos*dim:],
// pos its place in the order, and latest[id*dim:].
func (m *logistic) epoch(ds dataset, order []int32, batch int, lr float64, grads, latest []float32) {
	d := ds.dim
	acc := make([]float64, d)
	for lo := 0; lo < len(order); lo += batch {
		hi := min(len(order), lo+batch)
		clear(acc)
		for pos := lo; pos < hi; pos++ {
			id := int(order[pos])
			x := ds.x[id*d : (id+1)*d]
			r := m.p(x) - float64(ds.y[id])
			for k, v := range x {
				g := r * float64(v)
				acc[k] += g
				grads[pos*d+k] = float32(g)
				latest[id*d+k] = float32(g)
			}
		}
		f := lr / float64(hi-lo)
		for k := range m.w {
			m.w[k] -= f * acc[k]
		}
	}
}

// RunTraining trains one model per method from the same zero weights.
func RunTraining(ctx context.Context, c TrainConfig) (TrainResult, error) {
	if c.N < 2 || c.Dim < 1 || c.Block < 1 || c.Epochs < 1 || c.Batch < 1 || !(c.Buffer > 0 && c.Buffer <= 1) || !(c.LR > 0) {
		return TrainResult{}, fmt.Errorf("herding: training wants n ≥ 2, dim, block, epochs, batch ≥ 1, 0 < buffer ≤ 1 and lr > 0")
	}
	ds := makeData(c)
	d := ds.dim
	blocks := (c.N + c.Block - 1) / c.Block
	perBuf := max(1, int(math.Round(c.Buffer*float64(blocks))))
	res := TrainResult{Config: c, Loss: make([][]float64, len(TrainMethods))}
	for mi, method := range TrainMethods {
		m := &logistic{w: make([]float64, d)}
		grads := make([]float32, c.N*d)
		latest := make([]float32, c.N*d)
		have := make([]bool, c.N) // latest holds a gradient
		order := make([]int32, c.N)
		for e := range c.Epochs {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			// The block and buffer draws are the same for corgipile and
			// corgipile-balance: only the order inside buffers differs.
			rng := rand.New(rand.NewPCG(mix(c.Seed, uint64(e)), 1))
			switch {
			case method == "full (RR)" || (method == "grab" && e == 0):
				for i := range order {
					order[i] = int32(i)
				}
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			case method == "grab":
				order = grab.GraB(order, grads, d, c.Rule, mix(c.Seed, 7, uint64(e)))
			default:
				bperm := rng.Perm(blocks)
				order = order[:0]
				for g := 0; g < blocks; g += perBuf {
					start := len(order)
					for _, b := range bperm[g:min(blocks, g+perBuf)] {
						for i := b * c.Block; i < min(c.N, (b+1)*c.Block); i++ {
							order = append(order, int32(i))
						}
					}
					buf := order[start:]
					rng.Shuffle(len(buf), func(i, j int) { buf[i], buf[j] = buf[j], buf[i] })
					if method == "corgipile-balance" {
						balanceInPlace(buf, latest, have, d, c.Rule, mix(c.Seed, 8, uint64(e), uint64(g)))
					}
				}
			}
			m.epoch(ds, order, c.Batch, c.LR*math.Pow(c.Decay, float64(e)), grads, latest)
			for _, id := range order {
				have[id] = true
			}
			res.Loss[mi] = append(res.Loss[mi], m.loss(ds))
		}
	}
	return res, nil
}

// balanceInPlace reorders the examples of buf that have a latest gradient
// by PairBalance, into the places they hold; the others keep theirs (as
// the corgipile-balance strategy does).
func balanceInPlace(buf []int32, latest []float32, have []bool, d int, rule grab.Rule, seed uint64) {
	var slots []int
	var ids []int32
	var vecs []float32
	for k, id := range buf {
		if have[id] {
			slots, ids = append(slots, k), append(ids, id)
			vecs = append(vecs, latest[int(id)*d:int(id+1)*d]...)
		}
	}
	for k, id := range grab.PairBalance(ids, vecs, d, rule, seed) {
		buf[slots[k]] = id
	}
}

// WriteTrainTable writes the losses with a row per epoch and a column per
// method.
func WriteTrainTable(w io.Writer, r TrainResult) error {
	c := r.Config
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "full-pass training loss, logistic regression, n=%d d=%d sorted by label, blocks of %d, buffer %.0f%% of the blocks, batch %d, lr %g·%g^epoch, %s balance, seed %d\n",
		c.N, c.Dim, c.Block, 100*c.Buffer, c.Batch, c.LR, c.Decay, c.Rule, c.Seed)
	fmt.Fprint(tw, "epoch\t")
	for _, m := range TrainMethods {
		fmt.Fprintf(tw, "%s\t", m)
	}
	fmt.Fprintln(tw)
	for e := range c.Epochs {
		fmt.Fprintf(tw, "%d\t", e)
		for mi := range TrainMethods {
			fmt.Fprintf(tw, "%.5f\t", r.Loss[mi][e])
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("herding: writing table: %w", err)
	}
	return nil
}
