package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The plots are drawn by the corgifs-plot command, not in this binary:
// gonum/plot and its fonts would more than double the daemon's size for a
// feature the daemon never uses.
const (
	plotCommand = "corgifs-plot"
	plotPackage = "github.com/corgifs/corgifs/cmd/corgifs-plot"
)

// errNoPlotter says corgifs-plot was not found.
var errNoPlotter = errors.New("the corgifs-plot command, which draws plots, is not installed next to corgifs or on PATH " +
	"(install it with `go install " + plotPackage + "@latest`, or build ./cmd/corgifs-plot next to corgifs)")

// checkPlotPath refuses, before any work, a plot file of an extension
// corgifs-plot cannot write and a missing corgifs-plot.
func checkPlotPath(path string) error {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg", ".png":
	default:
		return fmt.Errorf("--plot %s: unsupported extension %q, want .svg or .png", path, ext)
	}
	if _, err := plotter(); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return nil
}

// plotter returns the command line that runs corgifs-plot: the one next to
// this executable (a release or go install puts both in one directory),
// else the one on PATH, else, when this binary runs from the go tool's
// build cache (go run, go test), `go run` of the package in the module.
func plotter() ([]string, error) {
	exe, err := os.Executable()
	if err == nil {
		if p := filepath.Join(filepath.Dir(exe), plotCommand); isExecutable(p) {
			return []string{p}, nil
		}
	}
	if p, err := exec.LookPath(plotCommand); err == nil {
		return []string{p}, nil
	}
	if exe != "" && strings.Contains(exe, string(filepath.Separator)+"go-build") {
		if goTool, err := exec.LookPath("go"); err == nil {
			return []string{goTool, "run", plotPackage}, nil
		}
	}
	return nil, errNoPlotter
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// drawPlot has corgifs-plot draw data, the report of kind (validate or
// herding), into the file out, passing the report as JSON on its standard
// input.
func drawPlot(ctx context.Context, kind string, data any, out string, flags ...string) error {
	argv, err := plotter()
	if err != nil {
		return fmt.Errorf("--plot %s: %w", out, err)
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("--plot %s: encoding the %s report: %w", out, kind, err)
	}
	args := append(append(append(argv[1:], kind), flags...), "-", out)
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("--plot %s: %s", out, msg)
	}
	return nil
}
