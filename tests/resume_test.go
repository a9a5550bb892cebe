package tests

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/shuffler"
)

// TestElasticResumeServesTheRestOfTheEpochExactlyOnceAtAnyK reads epoch 1
// of a K=4 mount partially (a different amount of each part), then reads
// the resume of that checkpoint at K'=3 and K'=6: what was read before and
// after is the epoch, each record once, and a second daemon serves the
// resume byte for byte alike.
func TestElasticResumeServesTheRestOfTheEpochExactlyOnceAtAnyK(t *testing.T) {
	src := genSynthetic(t, 4000, 8, 2, 3, "clustered")
	flags := append(slices.Clone(smallFlags), "--parts", "4")
	m := startMount(t, src, flags...)
	const epoch = 1
	var whole, before [][]byte
	tok := shuffler.ResumeToken{Parts: 4}
	for i := range 4 {
		recs := frames(t, m.read(epoch, i, 4))
		whole = append(whole, recs...)
		c := []int{0, len(recs) / 3, len(recs), 7}[i]
		before = append(before, recs[:c]...)
		tok.Consumed = append(tok.Consumed, int64(c))
	}
	want := sortedHashes(hashes(whole))
	other := startMount(t, src, flags...)
	for _, k := range []int{3, 6} {
		after := slices.Clone(before)
		for j := range k {
			p := shuffler.ResumePartPath(m.dir, epoch, []shuffler.ResumeToken{tok}, j, k, m.ext)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("K'=%d: %v\n%s", k, err, m.log)
			}
			b2, err := os.ReadFile(shuffler.ResumePartPath(other.dir, epoch, []shuffler.ResumeToken{tok}, j, k, m.ext))
			if err != nil || !bytes.Equal(b, b2) {
				t.Fatalf("K'=%d part %d: another daemon serves other bytes (%v)", k, j, err)
			}
			after = append(after, frames(t, b)...)
		}
		if got := sortedHashes(hashes(after)); !slices.EqualFunc(got, want, func(a, b [32]byte) bool { return a == b }) {
			t.Fatalf("K'=%d: read before and after the resume: %d records, the epoch has %d, or others", k, len(after), len(whole))
		}
	}
}

// TestElasticResumeOfMRSIsRefusedWithEINVALAndALogLine checks that a
// strategy where a resume is not defined says so rather than serving a
// wrong set.
func TestElasticResumeOfMRSIsRefusedWithEINVALAndALogLine(t *testing.T) {
	src := genSynthetic(t, 500, 8, 2, 1, "clustered")
	m := startMount(t, src, append(slices.Clone(smallFlags), "--strategy", "mrs")...)
	tok := shuffler.ResumeToken{Parts: 2, Consumed: []int64{1, 2}}
	_, err := os.Stat(shuffler.ResumePartPath(m.dir, 0, []shuffler.ResumeToken{tok}, 0, 3, m.ext))
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("stat of a resume part of an mrs mount: %v, want EINVAL", err)
	}
	// The daemon's log reaches the test through a pipe: wait for it.
	if !m.waitLog(regexp.MustCompile(`resume refused.*elastic resume is not defined for this strategy`), 10*time.Second) {
		t.Fatalf("no log line says why\n%s", m.log)
	}
}

// TestElasticResumeOfManyPartsNamesItsTokenInPieces checkpoints K=150
// parts, whose token is longer than one name may be: the path continues
// in subdirectories, and the resume at K'=5 still completes the epoch.
func TestElasticResumeOfManyPartsNamesItsTokenInPieces(t *testing.T) {
	src := genSynthetic(t, 6000, 8, 2, 3, "clustered")
	m := startMount(t, src, "--block-size", "4KiB", "--buffer", "16KiB", "--seed", "5")
	const epoch, k = 0, 150
	var whole, before [][]byte
	tok := shuffler.ResumeToken{Parts: k}
	for i := range k {
		recs := frames(t, m.read(epoch, i, k))
		whole = append(whole, recs...)
		c := (i * 7) % (len(recs) + 1)
		before = append(before, recs[:c]...)
		tok.Consumed = append(tok.Consumed, int64(c))
	}
	chain := []shuffler.ResumeToken{tok}
	if dir := shuffler.ResumeDir(chain...); !strings.Contains(dir, "/") {
		t.Fatalf("token of %d characters fits one name: the test needs a longer one", len(dir))
	}
	after := slices.Clone(before)
	for j := range 5 {
		b, err := os.ReadFile(shuffler.ResumePartPath(m.dir, epoch, chain, j, 5, m.ext))
		if err != nil {
			t.Fatalf("%v\n%s", err, m.log)
		}
		after = append(after, frames(t, b)...)
	}
	if !slices.Equal(sortedHashes(hashes(after)), sortedHashes(hashes(whole))) {
		t.Fatalf("read before and after: %d records, the epoch has %d, or others", len(after), len(whole))
	}
	// A piece split elsewhere is not the checkpoint's name.
	dir := shuffler.ResumeDir(chain...)
	cut := strings.Index(dir, "/")
	moved := dir[:cut-1] + "/" + dir[cut-1:cut] + dir[cut+1:]
	if _, err := os.Stat(filepath.Join(m.dir, shuffler.EpochName(epoch), moved, shuffler.PartName(0, 5, m.ext))); err == nil {
		t.Fatal("a token split at another place resolves too")
	}
}
