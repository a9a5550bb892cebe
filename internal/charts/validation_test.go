package charts

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/validator"
)

// sampleReport is validator's test report: a run per strategy, the last
// one an epoch short.
func sampleReport(strategies ...string) validator.Report {
	var r validator.Report
	for i, s := range strategies {
		run := validator.Run{Strategy: s}
		for e := range 10 {
			if i == len(strategies)-1 && e == 9 {
				break
			}
			f := float64(e+1) / 10
			run.Epochs = append(run.Epochs, validator.Epoch{Epoch: e, TrainLoss: 1.2 - 0.8*f + 0.05*float64(i), TrainAcc: 0.5 + 0.4*f, TestAcc: 0.45 + 0.4*f - 0.1*float64(i), Seconds: 1 + 0.1*float64(i)})
		}
		r.Runs = append(r.Runs, run)
	}
	return r
}

func TestPlotWritesSVGAndPNG(t *testing.T) {
	r := sampleReport("corgipile", "shuffle", "clustered", "no-shuffle", "sliding-window", "mrs")
	dir := t.TempDir()

	svgPath := filepath.Join(dir, "report.svg")
	if err := Validation(r, svgPath); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg, []byte("<svg")) || !bytes.HasSuffix(bytes.TrimSpace(svg), []byte("</svg>")) {
		t.Errorf("%s is not an SVG document (%d bytes)", svgPath, len(svg))
	}
	for _, want := range []string{"corgipile", "shuffle", "clustered", "no-shuffle", "sliding-window", "mrs", "Test accuracy", "Training loss", "epoch"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("SVG lacks the text %q", want)
		}
	}

	pngPath := filepath.Join(dir, "report.PNG")
	if err := Validation(r, pngPath); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s does not start with the PNG signature", pngPath)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil || cfg.Width <= cfg.Height || cfg.Height < 300 {
		t.Errorf("PNG is %dx%d (%v); want a wide image of two panels", cfg.Width, cfg.Height, err)
	}
	if img, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Errorf("PNG does not decode: %v", err)
	} else if colors := distinctColors(img); colors < 8 {
		t.Errorf("PNG has %d distinct colours; want lines in several", colors)
	}
}

// distinctColors returns the number of distinct colours in img.
func distinctColors(img image.Image) int {
	seen := map[color.RGBA64]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			seen[color.RGBA64Model.Convert(img.At(x, y)).(color.RGBA64)] = true
		}
	}
	return len(seen)
}

func TestPlotRejectsUnknownFormatsAndEmptyReports(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		r    validator.Report
		path string
		want string
	}{
		{sampleReport("a"), filepath.Join(dir, "plot.gif"), `unsupported extension ".gif", want .svg or .png`},
		{sampleReport("a"), filepath.Join(dir, "plot"), `unsupported extension ""`},
		{validator.Report{}, filepath.Join(dir, "plot.svg"), "the report has no runs"},
		{sampleReport("a"), filepath.Join(dir, "missing", "plot.svg"), "no such file or directory"},
	} {
		err := Validation(c.r, c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validation(%s): err = %v, want one containing %q", c.path, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed plots left %d files", len(entries))
	}
}

func TestPlotHandlesOneEpochAndManyEpochs(t *testing.T) {
	many := validator.Run{Strategy: "long"}
	for e := range 100 {
		many.Epochs = append(many.Epochs, validator.Epoch{Epoch: e, TrainLoss: 1 / float64(e+1), TestAcc: 0.9})
	}
	for _, r := range []validator.Report{
		{Runs: []validator.Run{{Strategy: "one", Epochs: []validator.Epoch{{Epoch: 0, TrainLoss: 0.5, TestAcc: 0.7}}}}},
		{Runs: []validator.Run{many}},
		{Runs: []validator.Run{{Strategy: "none yet"}}},
	} {
		path := filepath.Join(t.TempDir(), "p.svg")
		if err := Validation(r, path); err != nil {
			t.Errorf("%s: %v", r.Runs[0].Strategy, err)
		}
	}
	ticks := epochTicks{}.Ticks(0, 99)
	labelled := 0
	for _, tk := range ticks {
		if tk.Label != "" {
			labelled++
		}
	}
	if len(ticks) != 100 || labelled > 10 {
		t.Errorf("100 epochs get %d ticks, %d labelled; want 100, at most 10 labelled", len(ticks), labelled)
	}
}
