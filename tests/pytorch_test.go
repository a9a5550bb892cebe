package tests

import (
	"context"
	"encoding/json"
	"github.com/corgifs/corgifs/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// python is Debian's interpreter, where python3-torch and python3-numpy
// install (a python3 earlier on PATH, such as pyenv's, may lack them).
const python = "/usr/bin/python3"

const fashionDir = "/usr/share/datasets/fashion-mnist"

// torchOK skips a test where python cannot import torch and numpy.
func torchOK(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		testenv.Missing(t, "%s cannot import torch and numpy (Debian: apt-get install python3-torch python3-numpy; .ci/run does): %v\n%s",
			python, err, out)
	}
}

// runPython runs python with args (a script of examples/pytorch, or -c and
// code using the corgifs package of python/) and returns its stdout.
func runPython(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func TestPyTorchPartPathFollowsTheMappingRule(t *testing.T) {
	torchOK(t)
	out := runPython(t, "-c", `
import sys; sys.path.insert(0, "../python")
from corgifs import part_path
for r, R, w, W, e in [(0, 1, 0, 1, 0), (0, 1, 1, 2, 3), (1, 2, 0, 2, 7), (3, 4, 2, 3, 12)]:
    print(part_path("/m", e, r, R, w, W))
`)
	want := "/m/epoch-0000/part-00000-of-00001.tfrecord\n/m/epoch-0003/part-00001-of-00002.tfrecord\n" +
		"/m/epoch-0007/part-00002-of-00004.tfrecord\n/m/epoch-0012/part-00011-of-00012.tfrecord\n"
	if out != want {
		t.Fatalf("part_path gives\n%s\nwant\n%s", out, want)
	}
}

type trainReport struct {
	Epochs []struct {
		Epoch       int
		Records     int
		DistinctIDs int     `json:"distinct_ids"`
		IDs         []int64 `json:"ids"`
		TestAcc     float64 `json:"test_acc"`
	}
}

// trainThroughMount mounts the training set with flags, runs
// examples/pytorch/train.py on it with 2 DataLoader workers and returns its
// report, after checking that every epoch saw each of the records ids
// 0..records-1 exactly once across the workers.
func trainThroughMount(t *testing.T, train, test string, records, epochs int, flags ...string) trainReport {
	t.Helper()
	m := startMount(t, train, flags...)
	out := filepath.Join(t.TempDir(), "report.json")
	start := time.Now()
	stdout := runPython(t, "../examples/pytorch/train.py", "--mount", m.dir, "--test-dir", test, "--epochs", strconv.Itoa(epochs),
		"--workers", "2", "--batch", "64", "--lr", "0.05", "--report", out)
	t.Logf("train.py on a mount with %s (%.0fs):\n%s", strings.Join(flags, " "), time.Since(start).Seconds(), stdout)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r trainReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Epochs) != epochs {
		t.Fatalf("report has %d epochs, want %d", len(r.Epochs), epochs)
	}
	for _, e := range r.Epochs {
		if e.Records != records || e.DistinctIDs != records || len(e.IDs) != records {
			t.Fatalf("epoch %d: %d records, %d distinct ids, want %d of each", e.Epoch, e.Records, e.DistinctIDs, records)
		}
		for i, id := range e.IDs { // sorted
			if id != int64(i) {
				t.Fatalf("epoch %d: the %d-th smallest id is %d: some record was missed or repeated", e.Epoch, i, id)
			}
		}
	}
	m.stop()
	return r
}

// TestPyTorchDataLoaderTrainsLikeAFullShuffle is issue 6's proof: a plain
// PyTorch DataLoader with 2 workers, each reading its own part of a corgifs
// mount of label-sorted Fashion-MNIST, sees every record once per epoch and
// trains softmax regression as well as the validator's full shuffle, far
// better than the same loop on the source order.
func TestPyTorchDataLoaderTrainsLikeAFullShuffle(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	fuseOK(t)
	torchOK(t)
	if _, err := os.Stat(filepath.Join(fashionDir, "train-images-idx3-ubyte.gz")); err != nil {
		testenv.Missing(t, "Fashion-MNIST is not installed (Debian: apt-get install dataset-fashion-mnist; .ci/run does): %v", err)
	}
	data := filepath.Join(t.TempDir(), "fmnist")
	gen := corgifs(t, "gen", "fashion-mnist", data, "--order", "clustered", "--files", "8")
	match := regexp.MustCompile(`wrote (\d+) training records`).FindStringSubmatch(gen)
	if match == nil {
		t.Fatalf("gen fashion-mnist said %q", gen)
	}
	records, _ := strconv.Atoi(match[1])
	train, test := filepath.Join(data, "train"), filepath.Join(data, "test")
	const epochs = 3
	flags := []string{"--block-size", "32KiB", "--buffer", "10%", "--seed", "1", "--parts", "2"}

	start := time.Now()
	v := validateJSON(t, "validate", "--data", train, "--test", test, "--features", "image", "--strategies", "full",
		"--via", "direct", "--epochs", strconv.Itoa(epochs), "--batch", "64", "--lr", "0.05", "--seed", "1", "--cache-dir", t.TempDir())
	full := 100 * v.Runs[0].Epochs[epochs-1].TestAcc
	t.Logf("validator, full shuffle: %.2f%% (%.0fs)", full, time.Since(start).Seconds())

	corgi := trainThroughMount(t, train, test, records, epochs, flags...)
	none := trainThroughMount(t, train, test, records, epochs, append(flags, "--strategy", "none")...)
	c, n := 100*corgi.Epochs[epochs-1].TestAcc, 100*none.Epochs[epochs-1].TestAcc
	t.Logf("final test accuracy: PyTorch through corgipile %.2f%%, through none %.2f%%; validator full %.2f%%", c, n, full)
	if full < 75 {
		t.Fatalf("the validator's full shuffle reached only %.2f%%: the data or the validator is broken", full)
	}
	if d := full - c; d > 3 || d < -3 {
		t.Errorf("PyTorch through corgipile reached %.2f%%, %.2f points from the full shuffle's %.2f%%", c, -d, full)
	}
	if c-n < 10 {
		t.Errorf("PyTorch through corgipile %.2f%% is only %.2f points above the source order's %.2f%%", c, c-n, n)
	}
}
