package validator

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportJSONHasTheAgreedShape(t *testing.T) {
	r := Report{Runs: []Run{{Strategy: "corgipile", Epochs: []Epoch{{Epoch: 0, TrainLoss: 0.61, TrainAcc: 0.78, TestAcc: 0.77, Seconds: 1.9}}}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"runs":[{"strategy":"corgipile","epochs":[{"epoch":0,"train_loss":0.61,"train_acc":0.78,"test_acc":0.77,"seconds":1.9}]}]}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.Runs[0].Epochs[0] != r.Runs[0].Epochs[0] {
		t.Errorf("round trip gives %+v, %v", back, err)
	}
}

// sampleReport returns a report of the given strategies over 10 epochs,
// the last strategy missing its last epoch.
func sampleReport(strategies ...string) Report {
	var r Report
	for i, s := range strategies {
		run := Run{Strategy: s}
		for e := range 10 {
			if i == len(strategies)-1 && e == 9 {
				break
			}
			f := float64(e+1) / 10
			run.Epochs = append(run.Epochs, Epoch{Epoch: e, TrainLoss: 1.2 - 0.8*f + 0.05*float64(i), TrainAcc: 0.5 + 0.4*f, TestAcc: 0.45 + 0.4*f - 0.1*float64(i), Seconds: 1 + 0.1*float64(i)})
		}
		r.Runs = append(r.Runs, run)
	}
	return r
}

func TestWriteTableHasARowPerEpochAndAColumnPerStrategy(t *testing.T) {
	r := sampleReport("corgipile", "shuffle", "sliding-window", "clustered")
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	for _, want := range []string{"test accuracy (%)", "training loss", "training accuracy", "seconds per epoch",
		"epoch  corgipile  shuffle  sliding-window  clustered"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	// Epoch 9 of the first table: 0.45+0.4 = 85%, then 75%, 65%, and a gap.
	if !regexpLine(out, "9", "85.00", "75.00", "65.00", "-") {
		t.Errorf("table lacks the row of epoch 9 with the missing last epoch as -")
	}
	if n := strings.Count(out, "\n"); n != 4*12+3 {
		t.Errorf("table has %d lines, want 4 tables of 12 lines and 3 blank ones", n)
	}
}

// regexpLine reports whether some line of s holds exactly the given fields.
func regexpLine(s string, fields ...string) bool {
	for line := range strings.Lines(s) {
		if strings.Join(strings.Fields(line), " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

func TestPlotWritesSVGAndPNG(t *testing.T) {
	r := sampleReport("corgipile", "shuffle", "clustered", "no-shuffle", "sliding-window", "mrs")
	dir := t.TempDir()

	svgPath := filepath.Join(dir, "report.svg")
	if err := Plot(r, svgPath); err != nil {
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
	if err := Plot(r, pngPath); err != nil {
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
		r    Report
		path string
		want string
	}{
		{sampleReport("a"), filepath.Join(dir, "plot.gif"), `unsupported extension ".gif", want .svg or .png`},
		{sampleReport("a"), filepath.Join(dir, "plot"), `unsupported extension ""`},
		{Report{}, filepath.Join(dir, "plot.svg"), "the report has no runs"},
		{sampleReport("a"), filepath.Join(dir, "missing", "plot.svg"), "no such file or directory"},
	} {
		err := Plot(c.r, c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Plot(%s): err = %v, want one containing %q", c.path, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed plots left %d files", len(entries))
	}
}

func TestPlotHandlesOneEpochAndManyEpochs(t *testing.T) {
	many := Run{Strategy: "long"}
	for e := range 100 {
		many.Epochs = append(many.Epochs, Epoch{Epoch: e, TrainLoss: 1 / float64(e+1), TestAcc: 0.9})
	}
	for _, r := range []Report{
		{Runs: []Run{{Strategy: "one", Epochs: []Epoch{{Epoch: 0, TrainLoss: 0.5, TestAcc: 0.7}}}}},
		{Runs: []Run{many}},
		{Runs: []Run{{Strategy: "none yet"}}},
	} {
		path := filepath.Join(t.TempDir(), "p.svg")
		if err := Plot(r, path); err != nil {
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

func TestReportShowsTheFinalModelOnTheFullTrainingSetAndTheWorkers(t *testing.T) {
	r := Report{Runs: []Run{{Strategy: "pls:0.3", Workers: 8, SyncEvery: 100, Epochs: []Epoch{{Epoch: 0, TrainLoss: 0.61, TrainAcc: 0.78,
		TestAcc: 0.77, Seconds: 1.9, FullTrainLoss: 0.55, FullTrainAcc: 0.812, TestLoss: 0.6, Records: 60000, Steps: 938}}}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"runs":[{"strategy":"pls:0.3","epochs":[{"epoch":0,"train_loss":0.61,"train_acc":0.78,"test_acc":0.77,"seconds":1.9,` +
		`"full_train_loss":0.55,"full_train_acc":0.812,"test_loss":0.6,"records":60000,"steps":938}],"workers":8,"sync_every":100}]}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"8 workers reading their parts in lock-step, local SGD (models averaged every 100 steps",
		"training loss (model at the end of the epoch, full training set)", "training accuracy (%, model at the end of the epoch, full training set)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !regexpLine(out, "0", "81.20") || !regexpLine(out, "0", "0.5500") {
		t.Errorf("table lacks the full-training-set row of epoch 0:\n%s", out)
	}
}
