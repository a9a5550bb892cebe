package grab

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkOrders measures the order server's work per epoch: one order
// of 1M records of 64-dimensional vectors (a sketch of their gradients).
//
//	go test -run '^$' -bench Orders -benchtime 3x ./grab
func BenchmarkOrders(b *testing.B) {
	const n, dim, parts = 1 << 20, 64, 8
	rng := rand.New(rand.NewPCG(1, 1))
	vecs := make([]float32, n*dim)
	for i := range vecs {
		vecs[i] = float32(rng.NormFloat64())
	}
	served := make([]int32, n)
	for i := range served {
		served[i] = int32(i)
	}
	per := n / parts
	ps, pv := make([][]int32, parts), make([][]float32, parts)
	for i := range parts {
		ps[i], pv[i] = served[i*per:(i+1)*per], vecs[i*per*dim:(i+1)*per*dim]
	}
	for _, rule := range []Rule{Deterministic, Randomized} {
		for name, f := range map[string]func(){
			"GraB":        func() { GraB(served, vecs, dim, rule, 1) },
			"PairBalance": func() { PairBalance(served, vecs, dim, rule, 1) },
			"CDGraB-8":    func() { CDGraB(ps, pv, dim, rule, 1) },
		} {
			b.Run(fmt.Sprintf("%s/%v", name, rule), func(b *testing.B) {
				b.SetBytes(int64(4 * len(vecs)))
				for b.Loop() {
					f()
				}
			})
		}
	}
}
