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

// The training comparison runs every method from the same start and
// reports a finite full-pass loss per epoch, below the untrained model's
// log 2 on separable enough data.
func TestTrainingReportsAFullPassLossPerEpochForEveryOrder(t *testing.T) {
	c := TrainConfig{N: 600, Dim: 4, Block: 20, Buffer: 0.2, Epochs: 3, Batch: 8, LR: 0.2, Decay: 0.9, Separation: 3, Seed: 2}
	res, err := RunTraining(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for mi, m := range TrainMethods {
		if len(res.Loss[mi]) != c.Epochs {
			t.Fatalf("%s: %d losses for %d epochs", m, len(res.Loss[mi]), c.Epochs)
		}
		for e, l := range res.Loss[mi] {
			if !(l > 0 && l < 0.6931) {
				t.Errorf("%s epoch %d: loss %v, want in (0, log 2)", m, e, l)
			}
		}
	}
}
