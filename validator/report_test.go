package validator

import (
	"bytes"
	"encoding/json"
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
