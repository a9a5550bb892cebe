package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The daemon must not link the plotting libraries: they are drawn by
// cmd/corgifs-plot (plot.go).
func TestDaemonDoesNotLinkGonumPlot(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for pkg := range strings.Lines(string(out)) {
		if strings.HasPrefix(pkg, "gonum.org/v1/plot") || strings.Contains(pkg, "internal/charts") {
			t.Errorf("cmd/corgifs imports %s", strings.TrimSpace(pkg))
		}
	}
}

func TestPlotRefusesAnUnknownExtensionBeforeAnyWork(t *testing.T) {
	err := checkPlotPath("/tmp/x.gif")
	if err == nil || !strings.Contains(err.Error(), `unsupported extension ".gif", want .svg or .png`) {
		t.Errorf("checkPlotPath(x.gif) = %v", err)
	}
}
