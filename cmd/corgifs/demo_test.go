package main

import (
	"strings"
	"testing"

	"github.com/corgifs/corgifs/validator"
)

// demoReport is a report of the demo's orders whose test accuracy per
// epoch is given in percent.
func demoReport(acc map[string][]float64) validator.Report {
	var r validator.Report
	for _, s := range []string{"none", "corgipile", "full"} {
		run := validator.Run{Strategy: s}
		for e, a := range acc[s] {
			run.Epochs = append(run.Epochs, validator.Epoch{Epoch: e, TestAcc: a / 100})
		}
		r.Runs = append(r.Runs, run)
	}
	return r
}

// TestDemoVerdictRestsOnEverySeedAndEveryEpoch: the verdict is the mean of
// the seeds' final epochs, not one seed's, and names the worst gap of any
// epoch after the first over all seeds.
func TestDemoVerdictRestsOnEverySeedAndEveryEpoch(t *testing.T) {
	reports := []validator.Report{
		// Seed 1 ends 2 points short; epoch 1 of seed 2 is 3 points short,
		// epoch 0 of seed 3 15 (the first epoch does not count).
		demoReport(map[string][]float64{"none": {30, 35, 40}, "corgipile": {70, 80, 81}, "full": {75, 81, 83}}),
		demoReport(map[string][]float64{"none": {30, 35, 38}, "corgipile": {70, 78, 84}, "full": {75, 81, 83}}),
		demoReport(map[string][]float64{"none": {30, 35, 39}, "corgipile": {60, 81, 84}, "full": {75, 81, 83}}),
	}
	got := verdict(reports)
	for _, want := range []string{"mean of 3 seeds", "corgipile (83.0%) matches a full shuffle (83.0%)", "worst epoch after the first: -3.0 points", "source order reaches 39.0%"} {
		if !strings.Contains(got, want) {
			t.Errorf("verdict %q lacks %q", got, want)
		}
	}
	// One seed alone would have said it falls short.
	if got := verdict(reports[:1]); !strings.Contains(got, "falls short of") {
		t.Errorf("verdict of seed 1 alone %q: want it to fall short", got)
	}
}
