package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/herding"
	"github.com/corgifs/corgifs/validator"
)

func TestPlotDrawsAValidateReportFromStandardInput(t *testing.T) {
	r := validator.Report{Runs: []validator.Run{{Strategy: "corgipile", Epochs: []validator.Epoch{
		{Epoch: 0, TrainLoss: 0.6, TestAcc: 0.967}, {Epoch: 1, TrainLoss: 0.5, TestAcc: 0.983}}}}}
	b, _ := json.Marshal(r)
	out := filepath.Join(t.TempDir(), "v.svg")
	if err := run([]string{"validate", "-", out}, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(out)
	if err != nil || !bytes.Contains(svg, []byte("corgipile")) {
		t.Fatalf("%s: %v, %d bytes without the strategy's name", out, err, len(svg))
	}
	// Zoomed by default: the axes are labelled in the data's ranges
	// (accuracy 0.967 to 0.983, loss 0.5 to 0.6), not from 0.
	if bytes.Contains(svg, []byte(">0.2<")) {
		t.Errorf("the default plot labels 0.2 on an axis: not zoomed to the data")
	}
	if err := run([]string{"validate", "--zoom=false", "-", out}, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if svg, _ := os.ReadFile(out); !bytes.Contains(svg, []byte(">0.2<")) {
		t.Errorf("--zoom=false: no 0.2 label, the axes do not start at 0")
	}
}

func TestPlotDrawsAHerdingResultFromAFile(t *testing.T) {
	dir := t.TempDir()
	res := herding.Result{Config: herding.Config{N: 10, Workers: 2, Dim: 2}, Bounds: [][]float64{{4, 3}, {3, 2}, {2, 1}, {1, 0.5}}}
	b, _ := json.Marshal(res)
	in := filepath.Join(dir, "h.json")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"herding", in, filepath.Join(dir, "h.png")}, nil); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"validate", "-", filepath.Join(dir, "x.svg")}, strings.NewReader("{not json"))
	if err == nil || !strings.Contains(err.Error(), "reading -") {
		t.Errorf("bad JSON: err = %v, want one naming the input", err)
	}
}
