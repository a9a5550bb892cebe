package herding

import (
	"context"
	"testing"

	"github.com/corgifs/corgifs/grab"
)

// On a small case a few rounds already separate the methods: coordinating
// the workers' orders keeps the parallel herding bound below random
// reshuffling's.
func TestCDGraBBoundIsBelowDRRs(t *testing.T) {
	for _, rule := range []grab.Rule{grab.Deterministic, grab.Randomized} {
		res, err := Run(context.Background(), Config{N: 200, Workers: 8, Dim: 4, Rounds: 5, Seed: 3, Rule: rule})
		if err != nil {
			t.Fatal(err)
		}
		last := len(res.Bounds[0]) - 1
		drr, cd := res.Bounds[0][last], res.Bounds[3][last]
		if !(cd <= drr) {
			t.Errorf("%v: round %d: CD-GraB bound %.3f above D-RR's %.3f", rule, last, cd, drr)
		}
		for mi := range Methods {
			if res.Bounds[mi][0] != res.Bounds[0][0] {
				t.Errorf("%s: round 0 bound %.3f differs from D-RR's %.3f: round 0 is the same order for all", Methods[mi], res.Bounds[mi][0], res.Bounds[0][0])
			}
		}
	}
}
