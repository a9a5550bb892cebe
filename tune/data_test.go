package tune

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
)

// synth is a labelled dataset in a given order: record i has label
// labels[i] and features x[i].
type synth struct {
	labels []int64
	x      [][]float32
}

// clusters makes m records of k balanced classes, each a Gaussian cluster
// of dim features around its own centre (spread 0 makes every record of a
// class the same point), sorted by label.
func clusters(m, k, dim int, spread float64, seed uint64) synth {
	rng := rand.New(rand.NewPCG(seed, 1))
	centres := make([][]float64, k)
	for c := range centres {
		centres[c] = make([]float64, dim)
		for j := range centres[c] {
			centres[c][j] = rng.NormFloat64()
		}
	}
	var s synth
	for i := range m {
		c := i * k / m
		x := make([]float32, dim)
		for j := range x {
			x[j] = float32(centres[c][j] + spread*rng.NormFloat64())
		}
		s.labels = append(s.labels, int64(c))
		s.x = append(s.x, x)
	}
	return s
}

func (s synth) shuffled(seed uint64) synth {
	rng := rand.New(rand.NewPCG(seed, 2))
	out := synth{labels: slices.Clone(s.labels), x: slices.Clone(s.x)}
	rng.Shuffle(len(out.labels), func(i, j int) {
		out.labels[i], out.labels[j] = out.labels[j], out.labels[i]
		out.x[i], out.x[j] = out.x[j], out.x[i]
	})
	return out
}

// report cuts s into blocks of b records (the last one shorter) and
// analyses them, with the features or without.
func (s synth) report(t *testing.T, b int, features bool) DataReport {
	t.Helper()
	a := NewAnalysis()
	for from := 0; from < len(s.labels); from += b {
		a.StartBlock()
		for i := from; i < min(from+b, len(s.labels)); i++ {
			var x []float32
			if features {
				x = s.x[i]
			}
			if err := a.Record(s.labels[i], x); err != nil {
				t.Fatal(err)
			}
		}
		a.EndBlock()
	}
	r, err := a.Report(7)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// When every block holds records of one label only and every record of a
// label has the same gradient, a block's mean gradient is one record's, so
// the block-mean variance equals the record variance and h_D = b exactly;
// the label TV distance is its maximum, 1 - 1/K for balanced classes.
func TestOneLabelBlocksOfIdenticalRecordsGiveHDEqualToBlockRecords(t *testing.T) {
	for _, k := range []int{2, 4, 10} {
		s := clusters(6000, k, 5, 0, 1)
		for _, features := range []bool{false, true} {
			r := s.report(t, 20, features)
			if math.Abs(r.HD-20) > 1e-6 {
				t.Errorf("k=%d features=%v: h_D = %v, want 20", k, features, r.HD)
			}
			if want := 1 - 1/float64(k); math.Abs(r.LabelTV-want) > 1e-9 || math.Abs(r.LabelTVMax-want) > 1e-9 {
				t.Errorf("k=%d: label TV = %v (max %v), want %v", k, r.LabelTV, r.LabelTVMax, want)
			}
		}
	}
}

// For a uniformly random order, a block of b records is a sample without
// replacement, so E[b ||mean gradient - global||^2] = sigma^2 (m-b)/(m-1):
// h_D is about 1 (not 1/b: the paper's h_D multiplies the block-mean
// variance by b). The label TV distance is that of a sample of b labels,
// E = 1/2 sum_c E|X_c/b - p_c|, X_c binomial(b, p_c) up to the finite
// population, and the random-order baseline gives the same.
func TestShuffledOrderGivesHDNearOneAndSampleSizedTV(t *testing.T) {
	const m, k, b = 40000, 4, 20
	s := clusters(m, k, 8, 1, 2).shuffled(3)
	for _, features := range []bool{false, true} {
		r := s.report(t, b, features)
		want := float64(m-b) / float64(m-1)
		if math.Abs(r.HD-want) > 0.1 {
			t.Errorf("features=%v: h_D = %.3f, want %.3f +- 0.1", features, r.HD, want)
		}
		tv := expectedTV(b, 1/float64(k)) * k / 2
		if math.Abs(r.LabelTV-tv) > 0.05*tv || math.Abs(r.LabelTVShuf-tv) > 0.05*tv {
			t.Errorf("label TV = %.4f, random-order baseline %.4f, want both %.4f +- 5%%", r.LabelTV, r.LabelTVShuf, tv)
		}
	}
}

// expectedTV returns E|X/b - p| for X binomial(b, p).
func expectedTV(b int, p float64) float64 {
	var e float64
	for x := 0; x <= b; x++ {
		lg, _ := math.Lgamma(float64(b + 1))
		l1, _ := math.Lgamma(float64(x + 1))
		l2, _ := math.Lgamma(float64(b - x + 1))
		pmf := math.Exp(lg - l1 - l2 + float64(x)*math.Log(p) + float64(b-x)*math.Log(1-p))
		e += pmf * math.Abs(float64(x)/float64(b)-p)
	}
	return e
}

// A clustered order of noisy clusters lies between the two. A block of b
// records of one class c has E||mean - global||^2 = B_c + W_c/b, with B_c
// the squared distance of the class's mean gradient from the global one
// and W_c the class's own variance; with sigma^2 = mean(B_c + W_c) = B + W,
// h_D = (bB + W)/(B + W) = 1 + (b-1) B/sigma^2: it grows linearly in b
// from exactly 1 at blocks of one record.
func TestClusteredOrderHDGrowsLinearlyWithBlockRecords(t *testing.T) {
	s := clusters(20000, 4, 8, 1, 4)
	if r := s.report(t, 1, true); math.Abs(r.HD-1) > 1e-9 {
		t.Errorf("blocks of one record: h_D = %v, want 1", r.HD)
	}
	r10, r40 := s.report(t, 10, true), s.report(t, 40, true)
	rho := (r10.HD - 1) / 9
	if want := 1 + 39*rho; !(rho > 0.2 && rho < 1) || math.Abs(r40.HD-want) > 0.05*want {
		t.Errorf("h_D = %.2f at 10 records a block, %.2f at 40: want 1+9B, 1+39B, 0.2 < B < 1 (B = %.3f)", r10.HD, r40.HD, rho)
	}
	if r := s.shuffled(5).report(t, 40, true); r.HD > 1.2 || r40.LabelTV < 0.74 || r.LabelTV > 0.2 {
		t.Errorf("shuffled: h_D %.2f, TV %.3f; clustered TV %.3f", r.HD, r.LabelTV, r40.LabelTV)
	}
}

func TestUnequalBlocksKeepHDNearOneForARandomOrder(t *testing.T) {
	s := clusters(30000, 3, 4, 1, 6).shuffled(7)
	a := NewAnalysis()
	rng := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < len(s.labels); {
		n := 1 + rng.IntN(60)
		a.StartBlock()
		for ; n > 0 && i < len(s.labels); n, i = n-1, i+1 {
			a.Record(s.labels[i], s.x[i])
		}
		a.EndBlock()
	}
	r, _ := a.Report(1)
	if math.Abs(r.HD-1) > 0.1 {
		t.Errorf("h_D = %.3f with blocks of 1 to 60 records in a random order, want 1 +- 0.1", r.HD)
	}
}

func TestRecordsWithDifferentFeatureCountsAreRefused(t *testing.T) {
	a := NewAnalysis()
	a.StartBlock()
	a.Record(1, []float32{1, 2})
	if err := a.Record(1, []float32{1}); err == nil || !strings.Contains(err.Error(), "1 features") {
		t.Errorf("err = %v", err)
	}
	// An id taken for the label would make a class of every record.
	a = NewAnalysis()
	x := make([]float32, 1000)
	var err error
	for i := int64(0); err == nil && i < 1<<20; i++ {
		err = a.Record(i, x)
	}
	if err == nil || !strings.Contains(err.Error(), "distinct values") {
		t.Errorf("a label of a million distinct values: err = %v", err)
	}
	if _, err := NewAnalysis().Report(1); err != ErrNoRecords {
		t.Errorf("empty report: err = %v", err)
	}
}

// NeededBlocks is the smallest n with (1-alpha) h_D <= 1.
func TestNeededBlocksIsTheSmallestBufferMeetingTheBound(t *testing.T) {
	if n := NeededBlocks(0.9, 100); n != 1 {
		t.Errorf("h_D 0.9: n = %d, want 1", n)
	}
	if n := NeededBlocks(2, 101); n != 51 {
		t.Errorf("h_D 2 of 101 blocks: n = %d, want 51", n)
	}
	if n := NeededBlocks(1e9, 50); n != 50 {
		t.Errorf("huge h_D: n = %d, want all 50", n)
	}
	for _, hd := range []float64{1.01, 1.5, 3, 7.7, 28.3, 38} {
		for _, all := range []int{2, 10, 1584, 10007} {
			n := NeededBlocks(hd, all)
			if BoundAt(hd, n, all) > 1+1e-12 || (n > 1 && BoundAt(hd, n-1, all) <= 1) {
				t.Errorf("h_D %v, %d blocks: n = %d, bound there %v, at n-1 %v", hd, all, n, BoundAt(hd, n, all), BoundAt(hd, n-1, all))
			}
		}
	}
}

func TestRecommendIsTheSmallestSizeWithinTenPercentOfTheBest(t *testing.T) {
	ts := []Throughput{{BlockSize: 1, MBps: 100}, {BlockSize: 2, MBps: 890}, {BlockSize: 4, MBps: 950},
		{BlockSize: 8, MBps: 1000}, {BlockSize: 16, MBps: 990}, {BlockSize: 32, Skipped: "no file"}}
	if rec, best := Recommend(ts, 0); rec != 4 || best != 8 {
		t.Errorf("Recommend = %d, %d; want 4, 8", rec, best)
	}
	if rec, _ := Recommend(ts, 5); rec != 8 {
		t.Errorf("Recommend at least 5 = %d, want 8", rec)
	}
	// No size at or above the floor within 10%: the fastest of them.
	ts[3].MBps, ts[4].MBps = 700, 800
	if rec, best := Recommend(ts, 5); rec != 16 || best != 4 {
		t.Errorf("Recommend at least 5, slow there = %d (best %d), want 16 (4)", rec, best)
	}
}

func frame(payload []byte) []byte {
	return formats.AppendFrame(nil, payload)
}

func TestTFExampleDecodesLabelAndFeatures(t *testing.T) {
	var b tfexample.Builder
	b.Int64("y", 3)
	b.Bytes("img", []byte{0, 255, 51})
	b.Float("f", 1.5, 2)
	p := b.AppendTo(nil)
	label, x, err := TFExample{Label: "y", Features: "img"}.Decode(frame(p), nil)
	if err != nil || label != 3 || !slices.Equal(x, []float32{0, 1, 0.2}) {
		t.Errorf("bytes: %d %v %v", label, x, err)
	}
	label, x, err = TFExample{Label: "y", Features: "f"}.Decode(frame(p), nil)
	if err != nil || label != 3 || !slices.Equal(x, []float32{1.5, 2}) {
		t.Errorf("floats: %d %v %v", label, x, err)
	}
	if _, _, err := (TFExample{Label: "y", Features: "nope"}).Decode(frame(p), nil); err == nil || !strings.Contains(err.Error(), `"img"`) {
		t.Errorf("missing features: err = %v, want the names that exist", err)
	}
	if _, _, err := (TFExample{Label: "f"}).Decode(frame(p), nil); err == nil || !strings.Contains(err.Error(), "int64_list") {
		t.Errorf("float label: err = %v", err)
	}
}
