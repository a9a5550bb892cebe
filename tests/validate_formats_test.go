package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// genFormats are the formats `corgifs gen synthetic --format` writes.
var genFormats = []string{"tfrecord", "csv", "jsonl", "libsvm", "wds", "npy"}

// genFormat writes the same synthetic training and test sets in format
// and returns their directories.
func genFormat(t *testing.T, format string, records, features, classes, files int, order string) (train, test string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), format)
	train, test = filepath.Join(dir, "train"), filepath.Join(dir, "test")
	common := []string{"--features", fmt.Sprint(features), "--classes", fmt.Sprint(classes), "--seed", "3", "--format", format}
	corgifs(t, append([]string{"gen", "synthetic", train, "--records", fmt.Sprint(records), "--files", fmt.Sprint(files), "--order", order}, common...)...)
	corgifs(t, append([]string{"gen", "synthetic", test, "--records", "1000", "--files", "1", "--order", "shuffled",
		"--first-id", fmt.Sprint(records)}, common...)...)
	return train, test
}

// formatFlags are the flags validate needs to read format as gen writes it.
func formatFlags(format string) []string {
	if format == "npy" {
		return []string{"--ignore-columns", "1"} // columns label, id, features
	}
	return nil
}

// sameRuns fails unless two reports have the same runs, epoch by epoch.
func sameRuns(t *testing.T, what string, got, want report) {
	t.Helper()
	if len(got.Runs) != len(want.Runs) {
		t.Fatalf("%s: %d runs, tfrecord %d", what, len(got.Runs), len(want.Runs))
	}
	for i, run := range got.Runs {
		w := want.Runs[i]
		if run.Strategy != w.Strategy || len(run.Epochs) != len(w.Epochs) {
			t.Fatalf("%s: run %d is %s with %d epochs, tfrecord's %s with %d", what, i, run.Strategy, len(run.Epochs), w.Strategy, len(w.Epochs))
		}
		for e, ep := range run.Epochs {
			we := w.Epochs[e]
			if d := ep.TrainLoss - we.TrainLoss; d > 1e-9 || d < -1e-9 || ep.TestAcc != we.TestAcc || ep.TrainAcc != we.TrainAcc {
				t.Errorf("%s %s epoch %d: loss %v, train acc %v, test acc %v; tfrecord: %v, %v, %v",
					what, run.Strategy, e, ep.TrainLoss, ep.TrainAcc, ep.TestAcc, we.TrainLoss, we.TrainAcc, we.TestAcc)
			}
		}
	}
}

// TestValidateEveryFormatViaFilesTrainsLikeTFRecord: `corgifs validate
// --via files` reads the files gen wrote in each format, in their order,
// detecting the format from the extensions, and trains exactly as on the
// TFRecord version of the same records.
func TestValidateEveryFormatViaFilesTrainsLikeTFRecord(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	var want report
	for _, format := range genFormats {
		train, test := genFormat(t, format, 4000, 12, 4, 3, "shuffled")
		r := validateJSON(t, append([]string{"validate", "--data", train, "--test", test, "--via", "files", "--strategies", "none",
			"--epochs", "2", "--batch", "16", "--lr", "0.05"}, formatFlags(format)...)...)
		if format == "tfrecord" {
			want = r
			if acc := r.Runs[0].Epochs[1].TestAcc; acc < 0.7 {
				t.Fatalf("tfrecord: test accuracy %.3f: the model or data is broken", acc)
			}
			continue
		}
		sameRuns(t, format, r, want)
	}
}

// TestValidateEveryFormatThroughAMountTrainsLikeTFRecord trains through
// real mounts of each format: the source order ("none") must train
// exactly as on TFRecord, and CorgiPile (whose blocks differ with the
// record sizes of each format) within 3 points of TFRecord's CorgiPile.
func TestValidateEveryFormatThroughAMountTrainsLikeTFRecord(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	fuseOK(t)
	var want report
	for _, format := range genFormats {
		t.Run(format, func(t *testing.T) {
			train, test := genFormat(t, format, 6000, 12, 4, 3, "clustered")
			r := validateJSON(t, append([]string{"validate", "--data", train, "--test", test, "--via", "mount", "--strategies", "none,corgipile",
				"--epochs", "2", "--batch", "1", "--lr", "0.01", "--block-size", "8KiB", "--buffer", "10%", "--seed", "5",
				"--cache-dir", t.TempDir()}, formatFlags(format)...)...)
			if format == "tfrecord" {
				want = r
				return
			}
			if len(want.Runs) == 0 {
				t.Skip("no tfrecord run to compare with")
			}
			none := report{Runs: r.Runs[:1]}
			sameRuns(t, format, none, report{Runs: want.Runs[:1]})
			got, w := r.Runs[1].Epochs[1].TestAcc, want.Runs[1].Epochs[1].TestAcc
			if d := 100 * (w - got); d > 3 {
				t.Errorf("%s: corgipile reached %.1f%%, tfrecord's corgipile %.1f%%", format, 100*got, 100*w)
			}
		})
	}
}

// TestValidateTellsWhatItCannotRead: a libsvm --features that is not a
// number, --via files with another strategy than none, and a data
// directory without any format's files are errors that say what to do.
func TestValidateTellsWhatItCannotRead(t *testing.T) {
	train, test := genFormat(t, "libsvm", 100, 4, 2, 1, "shuffled")
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "notes.md"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", train, "--test", test, "--via", "files", "--strategies", "none", "--features", "many"},
			`--features "many": for libsvm, the number of features`},
		{[]string{"--data", train, "--test", test, "--via", "files"},
			"--via files reads the source files in their order: pass --strategies none"},
		{[]string{"--data", empty, "--test", test, "--via", "files", "--strategies", "none"},
			"no data files in " + empty},
	} {
		_, stderr, code := run(append([]string{"validate", "--epochs", "1"}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("validate %s: exit %d, stderr %q; want an error containing %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// TestGenAndValidateHelpNameTheFormatFlags: the help of gen and validate
// lists --format with the formats, and validate's per-format flags.
func TestGenAndValidateHelpNameTheFormatFlags(t *testing.T) {
	for cmd, want := range map[string][]string{
		"gen synthetic":     {"-format", `(default "tfrecord")`, "csv, jsonl, libsvm, wds, npy", "qid"},
		"gen fashion-mnist": {"-format", `(default "tfrecord")`, "KEY.pixels"},
		"validate":          {"-format", "-label-column", "-ignore-columns", "-divide", "-header", "-record-size", "files (the --data files"},
	} {
		_, stderr, code := run(append(strings.Fields(cmd), "--help")...)
		if code != 0 {
			t.Errorf("%s --help: exit code %d", cmd, code)
		}
		for _, w := range want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s --help does not mention %q:\n%s", cmd, w, stderr)
			}
		}
	}
}
