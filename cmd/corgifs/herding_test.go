package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHerdingCommandPrintsTheTableAndDrawsThePlot(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "herding.svg")
	var out, errOut bytes.Buffer
	code := run([]string{"herding", "--n", "50", "--workers", "4", "--dim", "3", "--rounds", "2", "--plot", plot}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"D-RR", "ID-GraB (Bal)", "ID-GraB (PairBal)", "CD-GraB", "\n      2 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Errorf("plot %s not written: %v", plot, err)
	}
	out.Reset()
	if code := run([]string{"herding", "--train", "--examples", "400", "--epochs", "2", "--block", "20"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "corgipile-balance") {
		t.Errorf("herding --train: exit %d, output:\n%s%s", code, out.String(), errOut.String())
	}
	if code := run([]string{"herding", "--balance-rule", "sometimes"}, &out, &errOut); code != 1 {
		t.Errorf("an unknown --balance-rule exited %d, want 1", code)
	}
}
