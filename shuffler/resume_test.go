package shuffler

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// served lists the records of plan in served order.
func served(t testing.TB, pl *Planner, plan *Plan) []int32 {
	t.Helper()
	var ids []int32
	if err := pl.Walk(t.Context(), plan, func(r RecordRef) error { ids = append(ids, r.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	return ids
}

// checkpoint reads a random prefix of each of the k parts of epoch (some
// nothing, some all) and returns the counts and the records read.
func checkpoint(t testing.TB, pl *Planner, rng *rand.Rand, epoch, k int) (ResumeToken, []int32) {
	t.Helper()
	tok := ResumeToken{Parts: k}
	var read []int32
	for i := range k {
		p, err := pl.Plan(epoch, i, k)
		if err != nil {
			t.Fatal(err)
		}
		ids := served(t, pl, p)
		c := rng.IntN(len(ids) + 1)
		switch rng.IntN(5) {
		case 0:
			c = 0
		case 1:
			c = len(ids)
		}
		tok.Consumed = append(tok.Consumed, int64(c))
		read = append(read, ids[:c]...)
	}
	return tok, read
}

// resumed returns the records of the k parts of r, part by part.
func resumed(t testing.TB, pl *Planner, r *Resume, k int) [][]int32 {
	t.Helper()
	out := make([][]int32, k)
	for j := range k {
		p, err := r.Plan(j, k)
		if err != nil {
			t.Fatal(err)
		}
		out[j] = served(t, pl, p)
		if int64(len(out[j])) != p.Records {
			t.Fatalf("resume part %d of %d serves %d records, plan says %d", j, k, len(out[j]), p.Records)
		}
		var at int64
		for g, b := range p.Buffers {
			if b.Start != at {
				t.Fatalf("resume part %d of %d: buffer %d starts at %d, want %d", j, k, g, b.Start, at)
			}
			at += b.Size
		}
	}
	return out
}

// exactlyOnce fails unless ids hold each record of the index once.
func exactlyOnce(t testing.TB, what string, n int, ids []int32) {
	t.Helper()
	s := slices.Sorted(slices.Values(ids))
	if len(s) != n || len(slices.Compact(s)) != n || s[0] != 0 || s[n-1] != int32(n-1) {
		t.Fatalf("%s: %d records (%d distinct), want each of the %d once", what, len(ids), len(slices.Compact(slices.Clone(s))), n)
	}
}

func TestResumeAtAnyKServesTheRestOfTheEpochExactlyOnce(t *testing.T) {
	for _, strategy := range []string{"corgipile", "block", "none", "full", "once", "window", "local", "pls"} {
		pl := newPlanner(t, strategy, BufferSize{Percent: 30})
		n := len(pl.Index().Frames)
		rng := rand.New(rand.NewPCG(uint64(len(strategy)), 3))
		for trial := range 20 {
			epoch := trial % 3
			tok, before := checkpoint(t, pl, rng, epoch, 4)
			r, err := pl.Resume(epoch, tok)
			if err != nil {
				t.Fatal(err)
			}
			var seq []int32 // the resume's sequence, the same at every K'
			for _, k := range []int{1, 3, 6, 25} {
				parts := resumed(t, pl, r, k)
				after := slices.Concat(parts...)
				what := fmt.Sprintf("%s epoch %d %v resumed at K'=%d", strategy, epoch, tok.Consumed, k)
				exactlyOnce(t, what, n, slices.Concat(before, after))
				if seq == nil {
					seq = after
				} else if !slices.Equal(seq, after) {
					t.Fatalf("%s: the parts do not split the sequence of K'=1", what)
				}
				for j, p := range parts {
					if d := len(p) - len(after)/k; d < 0 || d > 1 {
						t.Fatalf("%s: part %d holds %d records of %d", what, j, len(p), len(after))
					}
				}
			}
			// A checkpoint of the resume, resumed again at another K''.
			tok2, before2 := ResumeToken{Parts: 3}, []int32(nil)
			for j, p := range resumed(t, pl, r, 3) {
				c := rng.IntN(len(p) + 1)
				tok2.Consumed = append(tok2.Consumed, int64(c))
				before2 = append(before2, resumed(t, pl, r, 3)[j][:c]...)
			}
			r2, err := pl.Resume(epoch, tok, tok2)
			if err != nil {
				t.Fatal(err)
			}
			after2 := slices.Concat(resumed(t, pl, r2, 6)...)
			exactlyOnce(t, fmt.Sprintf("%s epoch %d: resume of a resume", strategy, epoch), n, slices.Concat(before, before2, after2))
		}
	}
}

func TestResumeIsDeterministicAcrossPlanners(t *testing.T) {
	a, b := newPlanner(t, "corgipile", BufferSize{Percent: 20}), newPlanner(t, "corgipile", BufferSize{Percent: 20})
	tok := ResumeToken{Parts: 4, Consumed: []int64{5, 0, 17, 9}}
	ra, err := a.Resume(2, tok)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Resume(2, tok)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{3, 6} {
		if x, y := resumed(t, a, ra, k), resumed(t, b, rb, k); !slices.EqualFunc(x, y, slices.Equal) {
			t.Fatalf("K'=%d: two planners of the same index and seed give different resumes", k)
		}
	}
	// Another checkpoint orders its units anew.
	other, _ := a.Resume(2, ResumeToken{Parts: 4, Consumed: []int64{5, 0, 17, 10}})
	if slices.Equal(slices.Concat(resumed(t, a, ra, 1)...)[:20], slices.Concat(resumed(t, a, other, 1)...)[:20]) {
		t.Fatal("two checkpoints give the same order of units")
	}
}

func TestResumeKeepsBlockReadsAndServesThroughAStream(t *testing.T) {
	f := newStreamFixture(t)
	pl := f.planner(t, "corgipile", streamBuffer)
	tok := ResumeToken{Parts: 4, Consumed: []int64{100, 0, 599, 3}}
	r, err := pl.Resume(1, tok)
	if err != nil {
		t.Fatal(err)
	}
	ld := f.loader()
	for j := range 3 {
		p, err := r.Plan(j, 3)
		if err != nil {
			t.Fatal(err)
		}
		for g, b := range p.Buffers {
			if b.Blocks == nil {
				t.Fatalf("part %d buffer %d reads records one by one, want its blocks", j, g)
			}
		}
		var want []byte
		for _, id := range served(t, pl, p) {
			want = append(want, f.frame(f.records[id])...)
		}
		s := NewStream(pl, ld, p)
		got := make([]byte, p.Size+10)
		n, err := s.ReadAt(t.Context(), got, 0)
		s.Close()
		if err != nil || int64(n) != p.Size {
			t.Fatalf("part %d: read %d of %d bytes: %v", j, n, p.Size, err)
		}
		if !bytes.Equal(got[:n], want) {
			t.Fatalf("part %d: the stream's bytes are not the records of its plan", j)
		}
	}
}

func TestResumeWithEqualPartsGivesEveryPartTheSameCount(t *testing.T) {
	pl, err := NewPlanner(fixedIndex(), Params{Strategy: "corgipile", Seed: 7, Buffer: BufferSize{Percent: 30}, MaxMemory: 1 << 30, EqualParts: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := pl.Resume(0, ResumeToken{Parts: 4, Consumed: []int64{3, 20, 0, 7}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{3, 6, 7} {
		var counts []int64
		for j := range k {
			p, _ := r.Plan(j, k)
			counts = append(counts, p.Records)
		}
		if slices.Min(counts) != slices.Max(counts) {
			t.Fatalf("K'=%d: record counts %v", k, counts)
		}
	}
}

func TestResumeRefusesStrategiesWhereItIsNotDefined(t *testing.T) {
	for _, s := range []string{"mrs", "grab", "cdgrab", "corgipile-balance"} {
		pl := newPlanner(t, s, BufferSize{Percent: 30})
		_, err := pl.Resume(0, ResumeToken{Parts: 2, Consumed: []int64{1, 1}})
		if !errors.Is(err, ErrNoResume) || !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: %v, want ErrNoResume naming the strategy", s, err)
		}
	}
	pl := newPlanner(t, "corgipile", BufferSize{Percent: 30})
	if _, err := pl.Resume(0, ResumeToken{Parts: 2, Consumed: []int64{1, 1000}}); err == nil || !strings.Contains(err.Error(), "part 1 of 2") {
		t.Fatalf("a count beyond the part: %v", err)
	}
}

func TestResumeTokenHasOneSpelling(t *testing.T) {
	tok := ResumeToken{Parts: 4, Consumed: []int64{0, 1, 300, 1 << 33}}
	s := tok.String()
	// Pinned: python/corgifs/resume.py computes the same spelling.
	if s != "aecaaanmakaibaeaebzxh3a7" {
		t.Fatalf("token %s, the Python package spells it aecaaanmakaibaeaebzxh3a7", s)
	}
	got, err := ParseResumeToken(s, 1<<20)
	if err != nil || got.Parts != 4 || !slices.Equal(got.Consumed, tok.Consumed) {
		t.Fatalf("round trip of %s: %+v, %v", s, got, err)
	}
	if !IsTokenChunk(s) {
		t.Fatalf("%s is not a token chunk", s)
	}
	bad := []string{strings.ToUpper(s), s[:len(s)-1], s + "a", "x" + s[1:], "", "part"}
	for _, b := range bad {
		if _, err := ParseResumeToken(b, 1<<20); err == nil {
			t.Errorf("%q parsed", b)
		}
	}
	if _, err := ParseResumeToken(s, 3); err == nil {
		t.Error("K above the bound parsed")
	}
	long := ResumeToken{Parts: 500, Consumed: make([]int64, 500)}
	for i := range long.Consumed {
		long.Consumed[i] = int64(1000 + i)
	}
	dir := ResumeDir(long)
	for _, c := range strings.Split(dir, "/") {
		if len(c) > 255 {
			t.Fatalf("component of %d bytes", len(c))
		}
	}
	if strings.Join(strings.Split(strings.TrimPrefix(dir, ResumePrefix), "/"), "") != long.String() {
		t.Fatal("the pieces do not join to the token")
	}
}

// BenchmarkResume resolves a resume of 10⁶ records in 1000-record blocks
// (K = 4, half of each part consumed) and plans its 6 parts: the work a
// daemon does at the first lookup of a resume directory.
func BenchmarkResume(b *testing.B) {
	ix := sizedIndex(equalFrames(1_000_000, 100), 1000)
	pl, err := NewPlanner(ix, Params{Strategy: "corgipile", Seed: 1, Buffer: BufferSize{Percent: 5}, MaxMemory: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	tok := ResumeToken{Parts: 4}
	for i := range 4 {
		p, _ := pl.Plan(0, i, 4)
		tok.Consumed = append(tok.Consumed, p.Records/2)
	}
	for b.Loop() {
		r, err := pl.Resume(0, tok)
		if err != nil {
			b.Fatal(err)
		}
		for j := range 6 {
			if _, err := r.Plan(j, 6); err != nil {
				b.Fatal(err)
			}
		}
	}
}
