package tests

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// feedbackData writes a small label-sorted two-class tabular set (18
// features, as the CD-GraB paper's mortgage data) and a held-out test set.
func feedbackData(t *testing.T) (train, test string) {
	t.Helper()
	return genSynthetic(t, 3000, 18, 2, 4, "clustered"), genSynthetic(t, 500, 18, 2, 1, "shuffled", "--first-id", "3000")
}

// checkFeedback fails unless run's feedback summary says that every part
// of every epoch was accepted and no epoch fell back to a random order.
func checkFeedback(t *testing.T, run map[string]any, epochs, parts int) {
	t.Helper()
	fb, ok := run["feedback"].(map[string]any)
	if !ok {
		t.Errorf("%s: no feedback in the report: %v", run["strategy"], run)
		return
	}
	if fb["accepted"] != float64(epochs*parts) || fb["refused"] != 0.0 || fb["fallbacks"] != 0.0 || fb["exact"] != true || fb["dim"] != 19.0 {
		t.Errorf("%s: feedback %v; want %d × %d files accepted, none refused, no fallback, exact gradients of 19 values",
			run["strategy"], fb, epochs, parts)
	}
}

// TestValidateGrabReadsFeedbackOrderedEpochsFromTheMountAsDirectDoes: the
// validator writes every epoch's per-example gradients into the mount's
// feedback files, the mount accepts them all and serves the next epoch in
// its balanced order without a timeout fallback, and the same run
// in-process (a planner reading a feedback store) gives the same numbers.
// An earlier run with another learning rate, in the same --cache-dir,
// leaves no orders behind that the mount would serve again.
func TestValidateGrabReadsFeedbackOrderedEpochsFromTheMountAsDirectDoes(t *testing.T) {
	fuseOK(t)
	train, test := feedbackData(t)
	cache := t.TempDir()
	common := []string{"validate", "--data", train, "--test", test, "--model", "logistic", "--strategies", "grab,corgipile-balance",
		"--epochs", "3", "--batch", "8", "--block-size", "8KiB", "--seed", "4", "--feedback-timeout", "20s", "--cache-dir", cache}
	rawValidate(t, append(common, "--lr", "0.5", "--via", "mount")...)
	args := append(common, "--lr", "0.05")
	a := rawValidate(t, append(args, "--via", "mount")...)
	b := rawValidate(t, append(args, "--via", "direct")...)
	for _, run := range a {
		checkFeedback(t, run, 3, 1)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("via mount:\n%s\nvia direct:\n%s", ja, jb)
	}
}

// TestValidateCDGrabWithFourWorkersHasEveryPartsFeedbackAccepted: with
// --workers 4 every epoch writes one feedback file per part, all four
// are accepted, and CD-GraB orders the next epoch from them.
func TestValidateCDGrabWithFourWorkersHasEveryPartsFeedbackAccepted(t *testing.T) {
	fuseOK(t)
	train, test := feedbackData(t)
	runs := rawValidate(t, "validate", "--data", train, "--test", test, "--model", "logistic", "--strategies", "cdgrab",
		"--workers", "4", "--epochs", "3", "--batch", "8", "--lr", "0.05", "--block-size", "8KiB", "--seed", "4",
		"--feedback-timeout", "20s", "--via", "mount", "--cache-dir", t.TempDir())
	checkFeedback(t, runs[0], 3, 4)
	if runs[0]["workers"] != 4.0 {
		t.Errorf("report says workers %v, want 4", runs[0]["workers"])
	}
}

// TestValidateLogisticWithAHundredFeaturesWritesExactGradientsThroughTheMount:
// logistic regression gives the order server its per-example gradients
// themselves whatever the feature count (101 values here, more than the
// default --sketch-dim of 64), and the mount takes vectors of that
// dimension. When they do not fit in --max-memory, validate refuses
// before training, naming the numbers.
func TestValidateLogisticWithAHundredFeaturesWritesExactGradientsThroughTheMount(t *testing.T) {
	fuseOK(t)
	train := genSynthetic(t, 1000, 100, 2, 2, "clustered")
	test := genSynthetic(t, 200, 100, 2, 1, "shuffled", "--first-id", "1000")
	args := []string{"validate", "--data", train, "--test", test, "--model", "logistic", "--strategies", "grab",
		"--epochs", "2", "--batch", "8", "--lr", "0.05", "--block-size", "8KiB", "--seed", "4", "--feedback-timeout", "20s",
		"--via", "mount", "--cache-dir", t.TempDir()}
	runs := rawValidate(t, args...)
	fb, ok := runs[0]["feedback"].(map[string]any)
	if !ok || fb["exact"] != true || fb["dim"] != 101.0 || fb["accepted"] != 2.0 || fb["fallbacks"] != 0.0 {
		t.Errorf("feedback %v; want exact gradients of 101 values, 2 files accepted, no fallback", runs[0]["feedback"])
	}
	out, err := exec.Command(bin, append(args, "--max-memory", "400KiB")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the exact per-example gradients (101 values) for 1000 records (records × (4 × 101 + 12) bytes = 406 KiB)") {
		t.Errorf("validate with vectors that do not fit --max-memory: %v\n%s", err, out)
	}
}
