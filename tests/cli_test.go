package tests

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
)

// run runs the binary and returns stdout, stderr and the exit code.
func run(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return out.String(), errb.String(), code
}

func TestHelpListsEveryFlagWithItsDefault(t *testing.T) {
	out, _, code := run("--help")
	for _, c := range []string{"mount", "unmount", "index", "order", "gen", "validate", "demo"} {
		if !strings.Contains(out, "  "+c+" ") {
			t.Errorf("corgifs --help does not list %s:\n%s", c, out)
		}
	}
	if code != 0 {
		t.Errorf("--help exit code %d", code)
	}
	cases := map[string][]string{
		"mount": {"-block-size", "(default: chosen from the dataset's size before indexing", "-buffer", "(default: 100% when all --parts fit", "-max-memory", "(default 1.0 GiB)",
			"-epochs", "(default 100)", "-parts", "(default 1)", "-strategy", `(default "corgipile")`, "-seed", "-include",
			"default: the format's", "-cache-dir", "-skip-corrupt", "-allow-other", "-nonempty", "-cpuprofile",
			"-format", "tfrecord, csv, jsonl, libsvm, lines, wds, npy, fixed", "-header", "-check", "-record-size", "-header-bytes"},
		"order":         {"-epoch", "-part", "-parts", "-seed", "-strategy", "-buffer", "-output", "-format"},
		"index":         {"-block-size", "-cache-dir", "-include", "-skip-corrupt", "-format", "-header", "-record-size"},
		"gen synthetic": {"-records", "-features", "-classes", "-order", "-files", "-seed", `(default "clustered")`},
		"demo":          {"-epochs", "-plot", "-synthetic"},
		"validate": {"-data", "-test", "-model", `(default "softmax")`, "-strategies", "-via", `(default "mount")`, "-json",
			"-plot", "-lr", "(default 0.05)", "-batch", "(default 64)", "-decay", "(default 0.95)", "-buffer", "-block-size", "-seed"},
		"gen fashion-mnist": {"-from", "/usr/share/datasets/fashion-mnist", "-order", "-files"},
		"unmount":           {"Usage: corgifs unmount"},
	}
	for cmd, want := range cases {
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

func TestBadFlagsGiveClearErrors(t *testing.T) {
	src := genSynthetic(t, 100, 4, 2, 1, "clustered")
	mnt := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"mount", src, mnt, "--block-size", "lots"}, "want a size such as 8MiB"},
		{[]string{"mount", src, mnt, "--buffer", "120%"}, "percentage must be in (0, 100]"},
		{[]string{"mount", src, mnt, "--strategy", "random"}, `unknown strategy "random"`},
		{[]string{"mount", src, mnt, "--seed", "-3"}, "want an unsigned integer"},
		{[]string{"mount", src}, "want 2 argument(s)"},
		{[]string{"mount", src, filepath.Join(src, "mnt")}, "inside the source"},
		{[]string{"mount", src, mnt, "--max-memory", "1KiB"}, "smaller than the largest block"},
		{[]string{"mount", filepath.Join(mnt, "nothing"), mnt}, "no such file"},
		{[]string{"order", src}, "--seed is required"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	}
	for _, c := range cases {
		_, stderr, code := run(c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("corgifs %s: exit %d, stderr %q; want an error containing %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

func TestOrderPrintsTheRecordsAMountServes(t *testing.T) {
	src := genSynthetic(t, 3000, 8, 3, 3, "clustered")
	flags := []string{"--block-size", "16KiB", "--buffer", "10%", "--seed", "9"}
	m := startMount(t, src, flags...)
	served := frames(t, m.read(4, 1, 3))
	out, _, code := run(append([]string{"order", src, "--epoch", "4", "--part", "1", "--parts", "3", "--cache-dir", t.TempDir()}, flags...)...)
	if code != 0 {
		t.Fatalf("order exit %d", code)
	}
	order := orderFrames(t, src, out)
	if len(order) != len(served) {
		t.Fatalf("order printed %d records, the mount served %d", len(order), len(served))
	}
	for i, o := range order {
		if !bytes.Equal(o.payload(), served[i]) {
			t.Fatalf("record %d: order says %s, which is not the record the mount served", i, o.line)
		}
	}
}

func TestIndexIsCachedAndRebuiltWhenASourceChanges(t *testing.T) {
	src := genSynthetic(t, 2000, 8, 2, 2, "clustered")
	cache := t.TempDir()
	out, stderr, code := run("index", src, "--cache-dir", cache)
	if code != 0 || !strings.Contains(out, "records     2000") || !strings.Contains(out, "from cache  false") {
		t.Fatalf("first index: exit %d\n%s%s", code, out, stderr)
	}
	if strings.Contains(stderr, "indexing") {
		t.Errorf("a progress bar was drawn on a pipe:\n%s", stderr)
	}
	out, _, _ = run("index", src, "--cache-dir", cache)
	if !strings.Contains(out, "from cache  true") {
		t.Fatalf("second index not from cache:\n%s", out)
	}
	names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(names[1], later, later); err != nil {
		t.Fatal(err)
	}
	out, stderr, _ = run("index", src, "--cache-dir", cache)
	if !strings.Contains(out, "from cache  false") || !strings.Contains(stderr, filepath.Base(names[1])) {
		t.Fatalf("changed file not noticed or not named:\n%s%s", out, stderr)
	}
	if entries, _ := os.ReadDir(src); len(entries) != 2 {
		t.Fatalf("index wrote into the source directory: %v", entries)
	}
}

func TestCorruptSourceFailsWithFileAndOffsetUnlessSkipped(t *testing.T) {
	src := genSynthetic(t, 500, 8, 2, 2, "clustered")
	names, _ := filepath.Glob(filepath.Join(src, "*.tfrecord"))
	b, _ := os.ReadFile(names[1])
	// Flip a byte in the data of a record about one third into the file.
	b[len(b)/3] ^= 0xff
	if err := os.WriteFile(names[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run("mount", src, t.TempDir(), "--cache-dir", t.TempDir())
	if code != 1 || !strings.Contains(stderr, names[1]) || !strings.Contains(stderr, "corrupt record at offset") || !strings.Contains(stderr, "--skip-corrupt") {
		t.Fatalf("mount of a corrupt source: exit %d, stderr:\n%s", code, stderr)
	}
	m := startMount(t, src, "--skip-corrupt", "--seed", "1")
	var cfg api.Config
	raw, _ := os.ReadFile(api.ConfigPath(m.dir))
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	sk := cfg.Dataset.Skipped
	if sk.Count != 1 || len(sk.Ranges) != 1 || sk.Ranges[0].File != filepath.Base(names[1]) ||
		sk.Ranges[0].From > int64(len(b)/3) || sk.Ranges[0].To <= int64(len(b)/3) {
		t.Fatalf("config.json skipped_corrupt = %+v; want one range in %s around offset %d", sk, filepath.Base(names[1]), len(b)/3)
	}
	if got := len(frames(t, m.read(0, 0, 1))); cfg.Dataset.Records == nil || int64(got) != *cfg.Dataset.Records || got != 499 {
		t.Fatalf("served %d records, config says %v, want 499", got, deref(cfg.Dataset.Records))
	}
}

// A gzip file of no TFRecord frames is decompressed and refused naming
// it; with --compression none it is refused as compressed data read as
// stored.
func TestCompressedTFRecordOfNoRecordsIsRefusedByName(t *testing.T) {
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "a.tfrecord"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	fmt.Fprint(zw, "pretend these are records")
	zw.Close()
	f.Close()
	_, stderr, code := run("index", src, "--cache-dir", t.TempDir())
	if code != 1 || !strings.Contains(stderr, "a.tfrecord (decompressed)") || !strings.Contains(stderr, "corrupt record at offset 0") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	_, stderr, code = run("index", src, "--cache-dir", t.TempDir(), "--compression", "none")
	if code != 1 || !strings.Contains(stderr, "a.tfrecord") || !strings.Contains(stderr, "compressed data where stored TFRecord frames were expected") {
		t.Fatalf("--compression none: exit %d, stderr:\n%s", code, stderr)
	}
	_, stderr, code = run("index", src, "--cache-dir", t.TempDir(), "--compression", "lz4")
	if code != 2 && code != 1 || !strings.Contains(stderr, `unknown --compression "lz4"`) {
		t.Fatalf("--compression lz4: exit %d, stderr:\n%s", code, stderr)
	}
}

func TestMountRefusesNonEmptyMountpoint(t *testing.T) {
	src := genSynthetic(t, 100, 4, 2, 1, "clustered")
	mnt := t.TempDir()
	os.WriteFile(filepath.Join(mnt, "keep"), nil, 0o644)
	_, stderr, code := run("mount", src, mnt)
	if code != 1 || !strings.Contains(stderr, "not empty") || !strings.Contains(stderr, "--nonempty") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}
