package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// workersData writes a small label-sorted training set of 10 classes and a
// held-out test set.
func workersData(t *testing.T) (train, test string) {
	t.Helper()
	return genSynthetic(t, 12000, 16, 10, 4, "clustered"), genSynthetic(t, 2000, 16, 10, 1, "shuffled", "--first-id", "12000")
}

// rawValidate runs validate and returns its JSON report without the
// seconds, which differ from run to run, and without what only a child
// mount reports.
func rawValidate(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	out := filepath.Join(t.TempDir(), "r.json")
	corgifs(t, append(args, "--json", out)...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Runs []map[string]any }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for _, run := range r.Runs {
		for _, e := range run["epochs"].([]any) {
			delete(e.(map[string]any), "seconds")
		}
		// What a run's child mount chose (its config.json) exists only
		// via mount, and what it logged (its warnings) not via files:
		// the runs compare what was trained.
		delete(run, "mount_config")
		delete(run, "warnings")
	}
	return r.Runs
}

// TestValidateWorkersWithFullShuffleTrainsLikeOneWorker: K workers in
// lock-step, each step averaging the gradients of batch/K records of every
// part, is synchronous SGD with the same global batch: on a full shuffle
// it ends where one worker does, within noise. The runs must still be K
// workers' (the report says so, and each step takes other records than
// one worker's, so no epoch's numbers are bit-identical to K=1's): a
// --workers that were ignored would end "within noise" too.
func TestValidateWorkersWithFullShuffleTrainsLikeOneWorker(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	train, test := workersData(t)
	args := []string{"validate", "--data", train, "--test", test, "--strategies", "full", "--via", "direct", "--epochs", "3",
		"--batch", "32", "--lr", "0.05", "--block-size", "8KiB", "--seed", "5", "--cache-dir", t.TempDir()}
	final := map[string]float64{}
	epochs := map[string][]any{}
	for _, k := range []string{"1", "4", "8"} {
		run := rawValidate(t, append(args, "--workers", k)...)[0]
		if k != "1" && fmt.Sprint(run["workers"]) != k {
			t.Errorf("--workers %s: the report says workers %v", k, run["workers"])
		}
		epochs[k] = run["epochs"].([]any)
		if len(epochs[k]) != 3 {
			t.Fatalf("--workers %s: %d epochs reported, want 3", k, len(epochs[k]))
		}
		final[k] = 100 * epochs[k][2].(map[string]any)["test_acc"].(float64)
	}
	t.Logf("final test accuracy by workers: %v", final)
	if final["1"] < 70 {
		t.Fatalf("one worker reached only %.1f%%: the model or data is broken", final["1"])
	}
	for _, k := range []string{"4", "8"} {
		if d := final[k] - final["1"]; d < -1.5 || d > 1.5 {
			t.Errorf("%s workers end at %.2f%%, one worker at %.2f%%: want within 1.5 points", k, final[k], final["1"])
		}
		for e := range epochs[k] {
			a, b := epochs[k][e].(map[string]any), epochs["1"][e].(map[string]any)
			if a["train_loss"] == b["train_loss"] {
				t.Errorf("epoch %d: %s workers and one worker have the same full training loss %v: the steps took the same records", e, k, a["train_loss"])
			}
		}
	}
}

// TestValidateWorkersTrainEveryRecordOfEveryEpochWhateverTheStrategy: K = 8
// lock-step workers on parts of unequal length (corgipile's and local's
// are balanced by bytes, a block apart; full's and window's differ by a
// record) train on every record of every epoch, as DDP's Join does, so
// that every strategy is trained by the same rule.
func TestValidateWorkersTrainEveryRecordOfEveryEpochWhateverTheStrategy(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	train, test := workersData(t)
	runs := rawValidate(t, "validate", "--data", train, "--test", test, "--strategies", "corgipile,full,local,window", "--via", "direct",
		"--workers", "8", "--epochs", "2", "--batch", "64", "--lr", "0.05", "--block-size", "8KiB", "--seed", "4", "--cache-dir", t.TempDir())
	for _, run := range runs {
		for _, e := range run["epochs"].([]any) {
			e := e.(map[string]any)
			if n, _ := e["records"].(float64); n != 12000 {
				t.Errorf("%s: epoch %v trained on %v records, want all 12000", run["strategy"], e["epoch"], e["records"])
			}
		}
	}
}

// TestValidateWorkersViaMountReadsTheSameRecordsAsDirect: the K part files
// of a real mount (pls with its exchange and partition, --equal-parts)
// give exactly the results of the same parts read in-process.
func TestValidateWorkersViaMountReadsTheSameRecordsAsDirect(t *testing.T) {
	fuseOK(t)
	train, test := workersData(t)
	args := []string{"validate", "--data", train, "--test", test, "--strategies", "pls,local", "--exchange", "0.3", "--partition", "contiguous",
		"--equal-parts", "--workers", "4", "--epochs", "2", "--batch", "16", "--lr", "0.05", "--block-size", "8KiB", "--buffer", "20%",
		"--seed", "6", "--cache-dir", t.TempDir()}
	a := rawValidate(t, append(args, "--via", "mount")...)
	b := rawValidate(t, append(args, "--via", "direct")...)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("via mount:\n%s\nvia direct:\n%s", ja, jb)
	}
	for _, run := range a {
		for _, e := range run["epochs"].([]any) {
			// Equal parts: every part ends at the same step, padded with
			// repeats of a few records.
			e := e.(map[string]any)
			if n, _ := e["records"].(float64); n < 12000 || int(n)%4 != 0 {
				t.Errorf("%s: epoch %v trained on %v records; equal parts want all 12000 (and padding), the same number a part", run["strategy"], e["epoch"], e["records"])
			}
		}
	}
}

// TestValidatePLSUsesTheGivenExchange: pls with --exchange 0.3 serves
// epoch 0 as local does and, from epoch 1, parts that exchanged blocks;
// pls:Q sets a run's own Q, and the labels say it.
func TestValidatePLSUsesTheGivenExchange(t *testing.T) {
	train, test := workersData(t)
	runs := rawValidate(t, "validate", "--data", train, "--test", test, "--strategies", "local,pls,pls:0", "--exchange", "0.3",
		"--partition", "contiguous", "--workers", "4", "--via", "direct", "--epochs", "2", "--batch", "16", "--lr", "0.05",
		"--block-size", "8KiB", "--seed", "7", "--cache-dir", t.TempDir())
	var labels []string
	for _, r := range runs {
		labels = append(labels, r["strategy"].(string))
	}
	if strings.Join(labels, ",") != "local,pls:0.3,pls:0" {
		t.Fatalf("runs labelled %v, want local, pls:0.3, pls:0", labels)
	}
	epoch := func(run, e int) string {
		b, _ := json.Marshal(runs[run]["epochs"].([]any)[e])
		return string(b)
	}
	if epoch(0, 0) != epoch(1, 0) {
		t.Errorf("epoch 0: local %s, pls %s; want the same parts", epoch(0, 0), epoch(1, 0))
	}
	if epoch(0, 1) == epoch(1, 1) {
		t.Errorf("epoch 1: pls --exchange 0.3 trained exactly as local (%s): the exchange was not used", epoch(0, 1))
	}
	if epoch(0, 1) != epoch(2, 1) {
		t.Errorf("epoch 1: pls:0 %s, local %s; want the same", epoch(2, 1), epoch(0, 1))
	}
}

// TestValidateWorkerFlagsGiveClearErrors: combinations that cannot mean
// anything are refused with what to do.
func TestValidateWorkerFlagsGiveClearErrors(t *testing.T) {
	data, test := t.TempDir(), t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "3", "--batch", "64"}, "--batch 64 is not a multiple of --workers 3"},
		{[]string{"--sync-every", "10"}, "pass --workers K with K > 1"},
		{[]string{"--workers", "2", "--sync-every", "-1"}, "--sync-every -1"},
		{[]string{"--strategies", "corgipile:0.3"}, "only pls takes an exchange fraction"},
		{[]string{"--strategies", "pls:1.5"}, "0 ≤ Q ≤ 1"},
		{[]string{"--strategies", "corgipile", "--exchange", "0.3"}, "--exchange is the Q of pls"},
		{[]string{"--strategies", "full", "--partition", "contiguous"}, "--partition applies to the strategies local, pls, grab and cdgrab"},
		{[]string{"--strategies", "none", "--via", "files", "--workers", "2", "--batch", "2"}, "--via files reads the source files as one stream"},
	} {
		_, stderr, code := run(append([]string{"validate", "--data", data, "--test", test, "--epochs", "1"}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("validate %s: exit %d, stderr %q; want an error containing %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// TestValidateHelpSaysWhatItsFeedbackAndPartitionFlagsApplyTo: validate
// sets its mounts' --feedback-dim itself (giving it is an error), so its
// help shows no default for it and says so; --partition applies to every
// strategy that keeps part sets, grab and cdgrab included.
func TestValidateHelpSaysWhatItsFeedbackAndPartitionFlagsApplyTo(t *testing.T) {
	_, help, _ := run("validate", "--help")
	i := strings.Index(help, "-feedback-dim")
	if i < 0 {
		t.Fatalf("validate --help lists no --feedback-dim:\n%s", help)
	}
	entry, _, _ := strings.Cut(help[i+1:], "\n  -")
	if !strings.Contains(entry, "set by validate itself") || strings.Contains(entry, "(default") {
		t.Errorf("validate --help on --feedback-dim: %q; want it said to be set by validate, with no default", entry)
	}
	if !strings.Contains(help, "--partition applies to local, pls, grab and\ncdgrab") {
		t.Errorf("validate --help does not say --partition applies to grab and cdgrab:\n%s", help)
	}
	data, test := t.TempDir(), t.TempDir()
	_, stderr, _ := run("validate", "--data", data, "--test", test, "--strategies", "grab", "--partition", "contiguous", "--epochs", "1")
	if strings.Contains(stderr, "--partition applies") {
		t.Errorf("validate refuses --partition with grab: %s", stderr)
	}
}

// TestValidateFullTrainingSetIsTheIndexedRecords: the final model is
// measured on the records the index holds, so a record --skip-corrupt left
// out is neither trained on nor read for the full-training-set pass.
func TestValidateFullTrainingSetIsTheIndexedRecords(t *testing.T) {
	src := genSynthetic(t, 600, 8, 3, 2, "clustered")
	test := genSynthetic(t, 300, 8, 3, 1, "shuffled", "--first-id", "600")
	names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	b, err := os.ReadFile(names[1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0xff
	if err := os.WriteFile(names[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := rawValidate(t, "validate", "--data", src, "--test", test, "--strategies", "full", "--skip-corrupt", "--via", "direct",
		"--workers", "2", "--epochs", "1", "--batch", "2", "--lr", "0.05", "--block-size", "8KiB", "--seed", "1", "--cache-dir", t.TempDir())
	e := r[0]["epochs"].([]any)[0].(map[string]any)
	if e["records"] != 599.0 || e["full_train_acc"] == nil {
		t.Errorf("epoch 0 %v: want the 599 indexed records trained on (the odd part's last one too: lock-step workers train every record) and the full-training-set measures", e)
	}
}
