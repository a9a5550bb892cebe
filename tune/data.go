// Package tune measures what a dataset and its storage need from corgifs:
// the block size at which random reads of the storage reach its best speed,
// and the shuffle buffer that CorgiPile needs for the dataset's source
// order: the one that mixes the labels of a buffer about as well as the
// whole dataset, and the larger one at which the paper's bound holds.
//
// # Storage
//
// Probe reads the source files at random 4 KiB-aligned offsets with
// O_DIRECT, several reads in flight as the loader issues them, for each
// block size from 64 KiB to 32 MiB, within a byte and a time budget per
// size, in a few rounds over all sizes whose median is the size's figure.
// The smallest block whose throughput is within 10% of the best is the
// CorgiPile paper's advice from its fio runs (larger blocks then cost
// memory and shuffle quality for nothing); the recommendation applies it
// to sizes of at least ProbeOptions.Floor, because a mount reads smaller
// blocks through the page cache, not at the speed direct reads measure.
// O_DIRECT reads bypass the page cache, so the figures are the storage's
// even when the data is cached; where the file system refuses O_DIRECT
// they are read through it, and are the cache's if the data is there.
//
// # Data
//
// Data reads the records of the index's blocks (all of them, or a seeded
// random sample up to a byte budget) and decodes a label and, optionally,
// a feature vector of each. It estimates two things.
//
// The label TV distance is the mean, over blocks weighted by their
// records, of the total variation distance between the label distribution
// of the block and that of all records: ½ Σ_c |n_{B,c}/b_B − m_c/m|. It is
// at most 1 − min_c m_c/m (every block holds one label) and small but not
// zero for a shuffled order (blocks are finite samples), so the same
// distance is also computed on the labels in a seeded random order cut
// into the same block sizes.
//
// The block heterogeneity h_D is the factor of the CorgiPile paper (Xu et
// al., SIGMOD 2022, Assumption "block-wise gradient variance"): with N
// blocks of b records, m records, per-record gradients ∇f_i(x), their mean
// ∇F(x) and block means ∇f_B(x) = (1/b) Σ_{i∈B} ∇f_i(x),
//
//	(1/m) Σ_i ‖∇f_i(x) − ∇F(x)‖² = σ²
//	(1/N) Σ_B ‖∇f_B(x) − ∇F(x)‖² = h_D · σ² / b
//
// so h_D is about 1 when records are placed at random (a block mean of b
// random records varies b times less than one record) and up to b when
// every block is as different from the rest as a single record is. The
// paper bounds h_D over all x; this package evaluates it at one x, the
// initial weights (all zero) of a softmax regression over the classes
// seen, with a bias: ∇f_i = (p − e_{y_i}) ⊗ (x_i, 1), p the uniform
// distribution over the K classes. The estimator, for blocks of unequal
// sizes b_B, is
//
//	h_D = [(1/N) Σ_B b_B ‖∇f_B − ∇F‖²] / [(1/m) Σ_i ‖∇f_i − ∇F‖²]
//
// which is the paper's ratio when all b_B = b, and whose expectation for a
// uniformly random order is (1/N) Σ_B (m − b_B)/(m − 1) ≈ 1 whatever the
// block sizes. It is computed in one pass from per-class sums (see
// gradStats), without storing gradients. Without a feature vector, x_i is
// empty and only the bias gradient, a function of the label, is measured.
//
// # Buffer
//
// With n of the N blocks in a buffer, the mean gradient of a buffer's
// records, sampled as n blocks without replacement, has variance
// (1 − α) · h_D · σ² / (n b), α = (n − 1)/(N − 1); a buffer of n b records
// drawn uniformly has σ² / (n b). The paper's convergence bound for
// CorgiPile has the leading term (1 − α) h_D σ² / T against σ² / T for SGD
// on uniform samples, so NeededBlocks returns the smallest n for which
// (1 − α) · h_D ≤ 1.
//
// That bound is a guarantee, and a conservative one: on a source sorted by
// label h_D is about 1 + (b − 1)ρ (ρ the share of the gradient variance
// between classes), and it asks for nearly all the blocks. On Fashion-MNIST
// sorted by label, in 32 KiB blocks (h_D 28), it asks for 1529 of 1584,
// while VALIDATION.md found CorgiPile matching a full shuffle's final
// accuracy within a point with 10% and 2% buffers. So the buffer tune
// recommends is chosen by a second, practical rule, the label mix of a
// buffer: Mix.ExpectedTV(n) is the expected TV distance between the label
// distribution of the records of n blocks drawn at random without
// replacement from the N blocks (as a buffer is) and that of all records,
// estimated by a seeded Monte Carlo over the blocks' label histograms;
// Mix.NeededBlocks gives the smallest n, at least 16, whose expected TV is
// at most a threshold. The default threshold, 0.1, comes from that
// measurement: there the buffers of 2% (31 blocks) have an expected TV of
// 0.21 and those of 10% (144 blocks) 0.094, and 0.1 asks for 128 blocks,
// where corgipile matched too (4 seeds). It is twice the TV of a uniform
// sample of 600 records of 10 classes (16 blocks of 38: 0.05), so a
// shuffled order needs no more than 16 blocks. It
// measures the label only: features clustered within a label (h_D with
// features shows them) are the bound's to catch.
package tune

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
)

// A Decoder reads the label and the features of one record, as the
// format's RecordReader returns it. Formats other than TFRecord (a CSV or
// LIBSVM column) add a Decoder; the estimators do not change.
type Decoder interface {
	// Decode returns the record's label and x with its features appended
	// (x unchanged when the decoder reads no features).
	Decode(record []byte, x []float32) (label int64, features []float32, err error)
}

// TFExample decodes TFRecord frames of tf.train.Example records: Label
// names an int64_list feature of one value, Features, if set, a float_list
// or a bytes_list of one value of uint8 values (scaled to [0, 1], as the
// validator does).
type TFExample struct {
	Label, Features string
}

// Decode implements Decoder.
func (d TFExample) Decode(frame []byte, x []float32) (int64, []float32, error) {
	if len(frame) < formats.FrameExtra {
		return 0, x, fmt.Errorf("a %d-byte record is shorter than a TFRecord frame", len(frame))
	}
	payload := frame[formats.HeaderLen : len(frame)-formats.FooterLen]
	var lf, ff tfexample.Feature
	var haveLabel, haveFeatures bool
	var names []string
	err := tfexample.Features(payload, func(name []byte, f tfexample.Feature) error {
		switch string(name) {
		case d.Label:
			lf, haveLabel = f, true
		case d.Features:
			ff, haveFeatures = f, d.Features != ""
		}
		if !haveLabel || (d.Features != "" && !haveFeatures) {
			names = append(names, string(name))
		}
		return nil
	})
	if err != nil {
		return 0, x, err
	}
	if !haveLabel {
		return 0, x, fmt.Errorf("no feature %q (the label); the record has %q", d.Label, names)
	}
	if lf.Kind() != tfexample.KindInt64 {
		return 0, x, fmt.Errorf("feature %q (the label) holds %v, want int64_list", d.Label, lf.Kind())
	}
	var lbuf [1]int64
	lv, err := lf.AppendInt64s(lbuf[:0])
	if err != nil {
		return 0, x, fmt.Errorf("feature %q (the label): %w", d.Label, err)
	}
	if len(lv) != 1 {
		return 0, x, fmt.Errorf("feature %q (the label) holds %d values, want 1", d.Label, len(lv))
	}
	if d.Features == "" {
		return lv[0], x, nil
	}
	if !haveFeatures {
		return 0, x, fmt.Errorf("no feature %q (the features); the record has %q", d.Features, names)
	}
	switch ff.Kind() {
	case tfexample.KindFloat:
		out, err := ff.AppendFloats(x)
		if err != nil {
			return 0, x, fmt.Errorf("feature %q (the features): %w", d.Features, err)
		}
		return lv[0], out, nil
	case tfexample.KindBytes:
		var bbuf [1][]byte
		bv, err := ff.AppendBytes(bbuf[:0])
		if err != nil {
			return 0, x, fmt.Errorf("feature %q (the features): %w", d.Features, err)
		}
		if len(bv) != 1 {
			return 0, x, fmt.Errorf("feature %q (the features) is a bytes_list of %d values, want one of uint8 values", d.Features, len(bv))
		}
		out := x
		for _, p := range bv[0] {
			out = append(out, float32(p)/255)
		}
		return lv[0], out, nil
	}
	return 0, x, fmt.Errorf("feature %q (the features) holds %v, want float_list or bytes_list", d.Features, ff.Kind())
}

// DataReport is what Data found.
type DataReport struct {
	Blocks       int     `json:"blocks"`        // blocks analysed
	BlocksInAll  int     `json:"blocks_in_all"` // blocks of the index
	Records      int64   `json:"records"`       // records analysed
	Classes      int     `json:"classes"`
	Features     int     `json:"features"`        // length of the feature vector, 0 without one
	BlockRecords float64 `json:"block_records"`   // mean records per block
	LabelTV      float64 `json:"label_tv"`        // mean TV distance, blocks against all
	LabelTVMax   float64 `json:"label_tv_max"`    // the most it can be: blocks of one label
	LabelTVShuf  float64 `json:"label_tv_random"` // the same blocks in a random order
	HD           float64 `json:"h_d"`
	// Mix estimates the label mix of buffers of these blocks (Data sets
	// it; Analysis.Mix makes one).
	Mix *Mix `json:"-"`
}

// Analysis accumulates blocks of records; Report gives the estimates.
// Blocks are added with Record calls between StartBlock and EndBlock.
type Analysis struct {
	classes map[int64]int32 // label -> class index, in order of appearance
	labels  []int32         // class of every record, in block order
	ends    []int64         // end of every block in labels
	dim     int             // feature vector length, set by the first record
	g       gradStats
	start   int
}

// NewAnalysis returns an empty Analysis.
func NewAnalysis() *Analysis {
	return &Analysis{classes: map[int64]int32{}}
}

// StartBlock begins a block.
func (a *Analysis) StartBlock() { a.start = len(a.labels) }

// Record adds a record of the current block. Every record must have the
// same number of features.
func (a *Analysis) Record(label int64, x []float32) error {
	if len(a.labels) == 0 {
		a.dim = len(x)
		a.g.init(len(x))
	} else if len(x) != a.dim {
		return fmt.Errorf("record %d has %d features, the first record had %d", len(a.labels), len(x), a.dim)
	}
	c, ok := a.classes[label]
	if !ok {
		if (len(a.classes)+1)*(a.dim+1) > maxClassValues {
			return fmt.Errorf("the label has more than %d distinct values: h_D keeps %d sums per class (is it a class label, and are the features right?)", len(a.classes), a.dim+1)
		}
		c = int32(len(a.classes))
		a.classes[label] = c
	}
	a.labels = append(a.labels, c)
	a.g.add(c, x)
	return nil
}

// EndBlock ends the current block. An empty block is ignored.
func (a *Analysis) EndBlock() {
	if len(a.labels) == a.start {
		return
	}
	a.ends = append(a.ends, int64(len(a.labels)))
	a.g.endBlock(int64(len(a.labels) - a.start))
}

// maxClassValues bounds the per-class sums h_D keeps (two float64 each):
// 256 MiB of them.
const maxClassValues = 1 << 24

// ErrNoRecords is returned by Report when no record was added.
var ErrNoRecords = errors.New("no records")

// Report computes the estimates. seed chooses the random order of the
// TV baseline.
func (a *Analysis) Report(seed uint64) (DataReport, error) {
	if len(a.labels) == 0 {
		return DataReport{}, ErrNoRecords
	}
	k := len(a.classes)
	r := DataReport{
		Blocks: len(a.ends), BlocksInAll: len(a.ends), Records: int64(len(a.labels)), Classes: k, Features: a.dim,
		BlockRecords: float64(len(a.labels)) / float64(len(a.ends)),
	}
	counts := make([]int64, k)
	for _, c := range a.labels {
		counts[c]++
	}
	r.LabelTV = labelTV(a.labels, a.ends, counts)
	r.LabelTVMax = 1 - float64(slices.Min(counts))/float64(len(a.labels))
	shuf := slices.Clone(a.labels)
	rng := rand.New(rand.NewPCG(seed, 0x636f726769))
	rng.Shuffle(len(shuf), func(i, j int) { shuf[i], shuf[j] = shuf[j], shuf[i] })
	r.LabelTVShuf = labelTV(shuf, a.ends, counts)
	r.HD = a.g.hd(k, len(a.ends))
	return r, nil
}

// labelTV is the record-weighted mean over blocks of the TV distance
// between a block's label distribution and the global one. A block's sum
// runs over its own labels only: a label it lacks adds its global share,
// so TV = (1 + Σ_{c in B} (|q_c − P_c| − P_c)) / 2, and the cost does not
// grow with the number of labels.
func labelTV(labels []int32, ends []int64, counts []int64) float64 {
	m := float64(len(labels))
	in := make([]int64, len(counts))
	var present []int32
	var sum float64
	var from int64
	for _, end := range ends {
		present = present[:0]
		for _, c := range labels[from:end] {
			if in[c] == 0 {
				present = append(present, c)
			}
			in[c]++
		}
		b := float64(end - from)
		tv := 1.0
		for _, c := range present {
			p := float64(counts[c]) / m
			tv += math.Abs(float64(in[c])/b-p) - p
			in[c] = 0
		}
		sum += b * tv / 2
		from = end
	}
	return sum / m
}

// gradStats holds what h_D needs, in one pass over the records. Write
// x̃ = (x, 1), T_B = Σ_{i∈B} x̃_i and S_{B,c} = Σ_{i∈B, y_i=c} x̃_i. At all
// zero weights the softmax gradient of record i is (p − e_{y_i}) ⊗ x̃_i
// with p_c = 1/K, so b_B ∇f_B has rows T_B/K − S_{B,c}. Centring on ∇F and
// expanding, with s_c = Σ_B S_{B,c} and t = Σ_B T_B over all m records,
//
//	Σ_B b_B ‖∇f_B − ∇F‖² = Σ_c (Σ_B ‖S_{B,c}‖²/b_B − ‖s_c‖²/m) − (Σ_B ‖T_B‖²/b_B − ‖t‖²/m)/K
//
// (the cross terms vanish because Σ_c S_{B,c} = T_B), and the per-record
// sum is the same with blocks of one record. So the pass keeps, per
// class, the vector s_c and the scalars Σ_B ‖S_{B,c}‖²/b_B and Σ_i ‖x̃_i‖²
// over its records, and the current block's S_{B,c}.
type gradStats struct {
	dim    int         // len(x̃)
	sum    [][]float64 // s_c
	blockS [][]float64 // S_{B,c} of the current block
	inBlk  []int32     // classes with records in the current block
	sqB    []float64   // Σ_B ‖S_{B,c}‖²/b_B
	sqR    []float64   // Σ_{i: y_i=c} ‖x̃_i‖²
	sqT    float64     // Σ_B ‖T_B‖²/b_B
	t      []float64   // T_B of the current block
}

func (g *gradStats) init(features int) { g.dim = features + 1 }

func (g *gradStats) add(c int32, x []float32) {
	for int(c) >= len(g.sum) {
		g.sum = append(g.sum, make([]float64, g.dim))
		g.blockS = append(g.blockS, make([]float64, g.dim))
		g.sqB = append(g.sqB, 0)
		g.sqR = append(g.sqR, 0)
	}
	if g.t == nil {
		g.t = make([]float64, g.dim)
	}
	bs := g.blockS[c]
	if bs[g.dim-1] == 0 {
		g.inBlk = append(g.inBlk, c)
	}
	s := g.sum[c]
	sq := 1.0
	for j, v := range x {
		f := float64(v)
		bs[j] += f
		s[j] += f
		g.t[j] += f
		sq += f * f
	}
	bs[g.dim-1]++
	s[g.dim-1]++
	g.t[g.dim-1]++
	g.sqR[c] += sq
}

func (g *gradStats) endBlock(b int64) {
	for _, c := range g.inBlk {
		bs := g.blockS[c]
		g.sqB[c] += norm2(bs) / float64(b)
		clear(bs)
	}
	g.inBlk = g.inBlk[:0]
	g.sqT += norm2(g.t) / float64(b)
	clear(g.t)
}

// hd returns h_D for k classes and n blocks.
func (g *gradStats) hd(k, n int) float64 {
	var m, sqR float64
	total := make([]float64, g.dim)
	for c, s := range g.sum {
		m += s[g.dim-1]
		sqR += g.sqR[c]
		for j, v := range s {
			total[j] += v
		}
	}
	t2 := norm2(total) / m
	var blocks, records float64
	for c, s := range g.sum {
		s2 := norm2(s) / m
		blocks += g.sqB[c] - s2
		records += g.sqR[c] - s2
	}
	blocks -= (g.sqT - t2) / float64(k)
	records -= (sqR - t2) / float64(k)
	if records <= 0 {
		return 0 // every record has the same gradient: nothing to shuffle
	}
	return (blocks / float64(n)) / (records / m)
}

func norm2(v []float64) float64 {
	var s float64
	for _, f := range v {
		s += f * f
	}
	return s
}

// NeededBlocks returns the smallest number n of blocks in a buffer, out
// of n in all, for which (1 − α) · hd ≤ 1, α = (n − 1)/(all − 1).
func NeededBlocks(hd float64, all int) int {
	if all <= 1 || hd <= 1 {
		return 1
	}
	n := 1 + int(math.Ceil(float64(all-1)*(1-1/hd)-1e-9))
	return min(max(n, 1), all)
}

// BoundAt returns (1 − α) · hd for a buffer of n of all blocks.
func BoundAt(hd float64, n, all int) float64 {
	if all <= 1 {
		return 0
	}
	n = min(max(n, 1), all)
	return (1 - float64(n-1)/float64(all-1)) * hd
}
