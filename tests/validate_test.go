package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

type report struct {
	Runs []struct {
		Strategy string
		Epochs   []struct {
			Epoch     int
			TrainLoss float64 `json:"train_loss"`
			TrainAcc  float64 `json:"train_acc"`
			TestAcc   float64 `json:"test_acc"`
			Seconds   float64
		}
	}
}

func validateJSON(t *testing.T, args ...string) report {
	t.Helper()
	out := filepath.Join(t.TempDir(), "r.json")
	corgifs(t, append(args, "--json", out)...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return r
}

// TestCorgiPileTrainsLikeAFullShuffle is a small version of VALIDATION.md:
// softmax regression with plain SGD on label-sorted data (10 classes), read
// through real mounts. CorgiPile
// must end within 2 points of a full shuffle, and the source order at least
// 15 points below it.
func TestCorgiPileTrainsLikeAFullShuffle(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	fuseOK(t)
	train := genSynthetic(t, 20000, 16, 10, 4, "clustered")
	test := genSynthetic(t, 4000, 16, 10, 1, "shuffled", "--first-id", "20000")
	r := validateJSON(t, "validate", "--data", train, "--test", test, "--strategies", "none,corgipile,full",
		"--epochs", "3", "--batch", "1", "--lr", "0.01", "--block-size", "8KiB", "--buffer", "10%", "--seed", "3", "--cache-dir", t.TempDir())
	final := map[string]float64{}
	for _, run := range r.Runs {
		if len(run.Epochs) != 3 {
			t.Fatalf("%s: %d epochs reported, want 3", run.Strategy, len(run.Epochs))
		}
		final[run.Strategy] = 100 * run.Epochs[2].TestAcc
	}
	t.Logf("final test accuracy: %v", final)
	if final["full"] < 70 {
		t.Fatalf("full shuffle reached only %.1f%%: the model or data is broken", final["full"])
	}
	if d := final["full"] - final["corgipile"]; d > 2 {
		t.Errorf("corgipile %.1f%% is %.1f points below full %.1f%%", final["corgipile"], d, final["full"])
	}
	if d := final["full"] - final["none"]; d < 15 {
		t.Errorf("source order %.1f%% is only %.1f points below full %.1f%%", final["none"], d, final["full"])
	}
}

func TestValidateDirectReadsTheSameBytesAsTheMount(t *testing.T) {
	fuseOK(t)
	train := genSynthetic(t, 5000, 8, 3, 2, "clustered")
	test := genSynthetic(t, 1000, 8, 3, 1, "shuffled", "--first-id", "5000")
	args := []string{"validate", "--data", train, "--test", test, "--strategies", "corgipile,window", "--epochs", "2",
		"--block-size", "8KiB", "--buffer", "5%", "--seed", "4", "--batch", "1", "--lr", "0.01", "--cache-dir", t.TempDir()}
	a := validateJSON(t, append(args, "--via", "mount")...)
	b := validateJSON(t, append(args, "--via", "direct")...)
	for i := range a.Runs {
		for e := range a.Runs[i].Epochs {
			x, y := a.Runs[i].Epochs[e], b.Runs[i].Epochs[e]
			if x.TrainLoss != y.TrainLoss || x.TestAcc != y.TestAcc {
				t.Fatalf("%s epoch %d: mount gives loss %v acc %v, direct gives %v %v", a.Runs[i].Strategy, e, x.TrainLoss, x.TestAcc, y.TrainLoss, y.TestAcc)
			}
		}
	}
}
