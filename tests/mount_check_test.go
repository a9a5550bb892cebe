package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A typo in an option is reported before anything is read: not after a
// full index of the source (issue 24), and not from a --background
// daemon's log.
func TestMountOptionTypoIsReportedBeforeTheSourceIsIndexed(t *testing.T) {
	src := genSynthetic(t, 2000, 8, 2, 2, "clustered")
	cache := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--strategy", "corgipil"}, `unknown strategy "corgipil"`},
		{[]string{"--strategy", "corgipil", "--background"}, `unknown strategy "corgipil"`},
		{[]string{"--coordinate-rank", "1"}, "--coordinate-rank 1 needs --coordinate DIR"},
		{[]string{"--index", "fast"}, `--index "fast": want full or probe`},
		{[]string{"--strategy", "block", "--partition", "contiguous"}, "--partition applies to --strategy local"},
	} {
		args := tc.args
		mnt := t.TempDir()
		_, stderr, code := run(append([]string{"mount", src, mnt, "--cache-dir", cache}, args...)...)
		if code == 0 {
			t.Fatalf("mount %s: exit 0", strings.Join(args, " "))
		}
		if strings.Contains(stderr, "index ready") || strings.Contains(stderr, "block size and buffer") {
			t.Errorf("mount %s: the source was read before the option was refused:\n%s", strings.Join(args, " "), stderr)
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("mount %s: stderr does not say %q:\n%s", strings.Join(args, " "), tc.want, stderr)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) > 0 {
		t.Errorf("the cache directory holds %d entries (%s...): an index was built before the options were checked", len(ents), filepath.Base(ents[0].Name()))
	}
}
