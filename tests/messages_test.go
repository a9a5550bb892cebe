package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenAndValidateErrorsNameTheFlagAndWhatExists runs the CLI with the
// mistakes a new user makes and checks each message names the flag (not a
// Go field), the known choices, and appears without a repeated prefix.
func TestGenAndValidateErrorsNameTheFlagAndWhatExists(t *testing.T) {
	data := genSynthetic(t, 400, 4, 2, 2, "shuffled")
	test := genSynthetic(t, 100, 4, 2, 1, "shuffled")
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "old.tfrecord"), []byte("x"), 0o644)
	cases := []struct {
		name   string
		args   []string
		want   []string
		absent []string
	}{
		{"unknown gen kind", []string{"gen", "foo", t.TempDir()}, []string{`unknown kind "foo"`, "synthetic or fashion-mnist"}, nil},
		{"gen records by flag name", []string{"gen", "synthetic", filepath.Join(t.TempDir(), "o"), "--records", "0"}, []string{"--records 0"}, []string{"Records"}},
		{"gen classes by flag name", []string{"gen", "synthetic", filepath.Join(t.TempDir(), "o"), "--classes", "1"}, []string{"--classes 1"}, []string{"Classes"}},
		{"gen into a non-empty directory", []string{"gen", "synthetic", full, "--records", "10", "--files", "1"}, []string{"is not empty", "old.tfrecord", "--force"}, nil},
		{"validate --strategy singular", []string{"validate", "--data", data, "--test", test, "--strategy", "full"}, []string{"no --strategy", "--strategies"}, nil},
		{"validate missing feature lists the features", []string{"validate", "--data", data, "--test", test, "--features", "nope", "--epochs", "1", "--strategies", "none"},
			[]string{`no feature "nope"`, `"features" (float_list)`, `"label" (int64_list)`}, nil},
		{"validate error has one prefix", []string{"validate", "--data", data, "--test", test, "--lr", "-1", "--epochs", "1", "--strategies", "none"},
			[]string{"LR must be a positive number"}, []string{"validator: none: validator:"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := exec.Command(bin, c.args...).CombinedOutput()
			if err == nil {
				t.Fatalf("corgifs %s succeeded:\n%s", strings.Join(c.args, " "), out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, a := range c.absent {
				if strings.Contains(string(out), a) {
					t.Errorf("output has %q:\n%s", a, out)
				}
			}
		})
	}
	// --force writes into the non-empty directory.
	if out, err := exec.Command(bin, "gen", "synthetic", full, "--records", "10", "--files", "1", "--force").CombinedOutput(); err != nil {
		t.Fatalf("gen --force: %v\n%s", err, out)
	}
}
