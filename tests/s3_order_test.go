package tests

import (
	"strings"
	"testing"
)

// corgifs order s3://bucket/prefix prints the lines of corgifs order of
// the same files in a local directory.
func TestS3OrderPrintsTheOrderOfTheLocalDirectory(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 500, 8, 2, 2, "clustered")
	s.upload("data", "o", src)
	flags := []string{"--seed", "4", "--parts", "2", "--part", "1", "--block-size", "8KiB", "--cache-dir", t.TempDir()}
	want := corgifs(t, append([]string{"order", src}, flags...)...)
	got := corgifs(t, append([]string{"order", "s3://data/o", "--s3-endpoint", s.endpoint}, flags...)...)
	if n := strings.Count(want, "\n"); n < 100 {
		t.Fatalf("order of the local directory printed %d lines:\n%s", n, want)
	}
	if got != want {
		t.Fatalf("order s3://data/o printed %d lines, not the %d lines of the local directory's order", strings.Count(got, "\n"), strings.Count(want, "\n"))
	}
}
