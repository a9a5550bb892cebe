package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/api"
)

// TestConfigJSONRecordsIncludeSoAReaderListsTheSameFiles: a mount given
// --include says so in config.json, so that a reader that rebuilds the
// order from it (the Python package's corgifs.order(mount) passes it to
// `corgifs order`) lists the files the mount serves; without --include
// the key is absent (the format's globs).
func TestConfigJSONRecordsIncludeSoAReaderListsTheSameFiles(t *testing.T) {
	src := genSynthetic(t, 800, 4, 2, 4, "shuffled")
	files, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	if len(files) != 4 {
		t.Fatalf("dataset files: %v", files)
	}
	// Two of the four files under another name, which only --include takes.
	for _, f := range files[:2] {
		if err := os.Rename(f, f+".rec"); err != nil {
			t.Fatal(err)
		}
	}
	include := func(m *mount) []string {
		var cfg api.Config
		b, _ := os.ReadFile(api.ConfigPath(m.dir))
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Include
	}
	m := startMount(t, src, "--seed", "3", "--include", "*.rec")
	if got := include(m); !slices.Equal(got, []string{"*.rec"}) {
		t.Errorf("config.json include = %q, want [*.rec]", got)
	}
	served := m.read(0, 0, 1)
	order := corgifs(t, "order", src, "--seed", "3", "--include", "*.rec", "--cache-dir", t.TempDir(), "--output", "file")
	if n, want := len(frames(t, served)), strings.Count(order, "\n"); n != want || n == 0 {
		t.Errorf("the mount served %d records, corgifs order with the recorded --include lists %d", n, want)
	}
	if got := include(startMount(t, src, "--seed", "3")); got != nil {
		t.Errorf("config.json include = %q without --include, want it absent", got)
	}
}
