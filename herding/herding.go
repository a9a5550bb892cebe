// Package herding reproduces the parallel-herding simulation of CD-GraB
// (Cooper et al., NeurIPS 2023, and its herding_bound_simulation.py): m
// workers each hold n random unit vectors, and every round each method
// chooses the workers' next orders; the parallel herding bound of the
// orders shows how far the running sum of all workers' steps strays from
// zero. Methods: D-RR (a fresh random permutation per worker), ID-GraB
// (Bal) and ID-GraB (PairBal) (each worker balances its own vectors alone),
// and CD-GraB (one server balances all workers' pair differences).
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

// Config is one simulation.
type Config struct {
	N       int       // vectors per worker
	Workers int       // m
	Dim     int       // d
	Rounds  int       // reorder rounds after round 0
	Seed    uint64    // of the vectors, and of D-RR's and the randomized rule's draws
	Rule    grab.Rule // the sign rule of the balancing methods
}

// Methods are the simulated methods, in the order of Result.Bounds.
var Methods = []string{"D-RR", "ID-GraB (Bal)", "ID-GraB (PairBal)", "CD-GraB"}

// Result holds Bounds[method][round]: the parallel herding bound of the
// orders of round r (round 0: every worker's vectors in generation order,
// the same for every method).
type Result struct {
	Config Config
	Bounds [][]float64
}

// Run simulates c. It checks ctx between rounds.
func Run(ctx context.Context, c Config) (Result, error) {
	if c.N < 1 || c.Workers < 1 || c.Dim < 1 || c.Rounds < 0 {
		return Result{}, fmt.Errorf("herding: want n ≥ 1, workers ≥ 1, dim ≥ 1 and rounds ≥ 0, got n=%d workers=%d dim=%d rounds=%d",
			c.N, c.Workers, c.Dim, c.Rounds)
	}
	vecs := vectors(c)
	res := Result{Config: c, Bounds: make([][]float64, len(Methods))}
	orders := make([][][]int32, len(Methods))
	for mi := range Methods {
		orders[mi] = make([][]int32, c.Workers)
		for w := range c.Workers {
			o := make([]int32, c.N)
			for j := range o {
				o[j] = int32(j)
			}
			orders[mi][w] = o
		}
	}
	sum := make([]float64, c.Dim)
	bound0 := parallelBound(vecs, orders[0], c.N, c.Dim, sum)
	for mi := range Methods {
		res.Bounds[mi] = append(res.Bounds[mi], bound0)
	}
	// One gathered copy of the vectors in served order, reused.
	gathered := make([][]float32, c.Workers)
	for w := range gathered {
		gathered[w] = make([]float32, c.N*c.Dim)
	}
	for r := 1; r <= c.Rounds; r++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		for mi := range Methods {
			ws := orders[mi]
			seed := mix(c.Seed, uint64(mi), uint64(r))
			switch Methods[mi] {
			case "D-RR":
				rng := rand.New(rand.NewPCG(seed, 1))
				for _, o := range ws {
					rng.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
				}
			case "ID-GraB (Bal)", "ID-GraB (PairBal)":
				f := grab.GraB
				if Methods[mi] == "ID-GraB (PairBal)" {
					f = grab.PairBalance
				}
				for w, o := range ws {
					gather(gathered[w], vecs[w], o, c.Dim)
					ws[w] = f(o, gathered[w], c.Dim, c.Rule, mix(seed, uint64(w)))
				}
			case "CD-GraB":
				for w, o := range ws {
					gather(gathered[w], vecs[w], o, c.Dim)
				}
				copy(ws, grab.CDGraB(ws, gathered, c.Dim, c.Rule, seed))
			}
			res.Bounds[mi] = append(res.Bounds[mi], parallelBound(vecs, ws, c.N, c.Dim, sum))
		}
	}
	return res, nil
}

// vectors draws the workers' unit vectors (Gaussian, normalised) and
// centres each worker's by its own mean, as the paper's simulation does;
// with equal n per worker the steps' sums are then the same as with
// centring by the global mean.
func vectors(c Config) [][]float32 {
	rng := rand.New(rand.NewPCG(c.Seed, 0x68657264696e67)) // "herding"
	out := make([][]float32, c.Workers)
	v := make([]float64, c.Dim)
	mean := make([]float64, c.Dim)
	for w := range out {
		clear(mean)
		out[w] = make([]float32, c.N*c.Dim)
		for j := range c.N {
			var norm float64
			for k := range v {
				v[k] = rng.NormFloat64()
				norm += v[k] * v[k]
			}
			norm = math.Sqrt(norm)
			for k := range v {
				v[k] /= norm
				out[w][j*c.Dim+k] = float32(v[k])
				mean[k] += v[k]
			}
		}
		for k := range mean {
			mean[k] /= float64(c.N)
		}
		for j := range c.N {
			for k := range c.Dim {
				out[w][j*c.Dim+k] = float32(float64(out[w][j*c.Dim+k]) - mean[k])
			}
		}
	}
	return out
}

func gather(dst, vecs []float32, order []int32, dim int) {
	for j, id := range order {
		copy(dst[j*dim:(j+1)*dim], vecs[int(id)*dim:int(id+1)*dim])
	}
}

// parallelBound is the parallel herding bound of the workers' orders:
// max over steps t of ‖Σ_{s ≤ t} Σ_w z_w[order_w[s]]‖∞, the vectors being
// centred. sum is scratch of dim values.
func parallelBound(vecs [][]float32, orders [][]int32, n, dim int, sum []float64) float64 {
	clear(sum)
	var m float64
	for t := range n {
		for w, o := range orders {
			v := vecs[w][int(o[t])*dim : int(o[t]+1)*dim]
			for k, x := range v {
				sum[k] += float64(x)
			}
		}
		for _, s := range sum {
			m = max(m, math.Abs(s))
		}
	}
	return m
}

// mix derives a seed from a seed and tags (SplitMix64 steps).
func mix(seed uint64, tags ...uint64) uint64 {
	h := splitmix64(seed)
	for _, t := range tags {
		h = splitmix64(h ^ t)
	}
	return h
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// WriteTable writes the bounds with a row per round and a column per
// method.
func WriteTable(w io.Writer, r Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	c := r.Config
	fmt.Fprintf(tw, "parallel herding bound, n=%d per worker, m=%d workers, d=%d, %s balance, seed %d\n",
		c.N, c.Workers, c.Dim, c.Rule, c.Seed)
	fmt.Fprint(tw, "round\t")
	for _, m := range Methods {
		fmt.Fprintf(tw, "%s\t", m)
	}
	fmt.Fprintln(tw)
	for round := range len(r.Bounds[0]) {
		fmt.Fprintf(tw, "%d\t", round)
		for mi := range Methods {
			fmt.Fprintf(tw, "%.3f\t", r.Bounds[mi][round])
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("herding: writing table: %w", err)
	}
	return nil
}
