package validator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/corgifs/corgifs/formats"
)

// DefaultDecay is the per-epoch learning-rate decay of the CorgiPile paper's
// experiments (Xu et al., SIGMOD 2022).
const DefaultDecay = 0.95

const (
	readBufSize = 1 << 20 // read buffer of a stream
	checkEvery  = 1024    // records between context checks
)

// A Trainer trains a Model by stochastic gradient descent, one pass over a
// stream of records per epoch.
//
// With Batch 1 it is plain SGD: every record updates the model. With a
// larger Batch it is mini-batch SGD: each update uses the mean gradient of
// Batch consecutive records (the last batch of an epoch may be smaller).
// The learning rate of epoch e is LR·Decay^e. With L2 > 0 every update also
// adds L2·w to the gradient of each weight w (not of the biases).
//
// The fields are read at every epoch; a Trainer keeps reused buffers
// between epochs and must not be used by several goroutines at once.
type Trainer struct {
	Model   *Model
	Decoder Decoder
	LR      float64 // learning rate of epoch 0, > 0
	Decay   float64 // learning-rate factor per epoch, in (0, 1]; 0 means DefaultDecay
	L2      float64 // L2 regularisation strength, ≥ 0
	Batch   int     // records per update; 0 means 1

	// Logger, if not nil, gets one Info line per epoch from Train.
	Logger *slog.Logger

	br    *bufio.Reader
	x     []float32
	gradW []float64 // gradient sums of the current mini-batch
	gradB []float64
}

// EpochStats describes one training epoch. The loss and accuracy of each
// record are measured before the update that uses it, so they track
// training as it happens, at no extra cost.
type EpochStats struct {
	Records   int64   // records read
	TrainLoss float64 // mean loss of the records (without the L2 term)
	TrainAcc  float64 // share of the records the model predicted right
}

// LearningRate returns the learning rate of the given epoch.
func (t *Trainer) LearningRate(epoch int) float64 {
	decay := t.Decay
	if decay == 0 {
		decay = DefaultDecay
	}
	return t.LR * math.Pow(decay, float64(epoch))
}

func (t *Trainer) check() error {
	switch {
	case t.Model == nil:
		return errors.New("validator: the Trainer has no Model")
	case t.Decoder == nil:
		return errors.New("validator: the Trainer has no Decoder")
	case !(t.LR > 0) || math.IsInf(t.LR, 0):
		return fmt.Errorf("validator: LR must be a positive number, got %v", t.LR)
	case t.Decay < 0 || t.Decay > 1 || math.IsNaN(t.Decay):
		return fmt.Errorf("validator: Decay must be in (0, 1] (0 for the default %v), got %v", DefaultDecay, t.Decay)
	case t.L2 < 0 || math.IsNaN(t.L2) || math.IsInf(t.L2, 0):
		return fmt.Errorf("validator: L2 must be a non-negative number, got %v", t.L2)
	case t.Batch < 0:
		return fmt.Errorf("validator: Batch must not be negative, got %d", t.Batch)
	}
	return nil
}

// TrainEpoch trains the model for one epoch on the stream r, such as a
// part file of a corgifs mount, read from start to end by the reader of
// the Decoder's format (which checks TFRecord CRCs, tar header checksums,
// the .npy header). Once its buffers have grown it does not allocate per
// record (for TFRecord, .npy and fixed-size records; text and tar
// decoders allocate a little).
func (t *Trainer) TrainEpoch(ctx context.Context, epoch int, r io.Reader) (EpochStats, error) {
	if err := t.check(); err != nil {
		return EpochStats{}, err
	}
	m := t.Model
	ep := epochState{lr: t.LearningRate(epoch), batch: max(t.Batch, 1), epoch: epoch}
	if ep.batch > 1 && len(t.gradW) != len(m.W) {
		t.gradW = make([]float64, len(m.W))
		t.gradB = make([]float64, len(m.B))
	}
	if seq, ok := r.(*Sequence); ok {
		for _, path := range seq.Paths {
			if err := t.trainFile(ctx, &ep, path); err != nil {
				return EpochStats{}, err
			}
		}
	} else if err := t.trainStream(ctx, &ep, r); err != nil {
		return EpochStats{}, err
	}
	if ep.inBatch > 0 {
		t.applyBatch(ep.lr, ep.inBatch)
	}
	st := ep.st
	if st.Records > 0 {
		st.TrainLoss = ep.lossSum / float64(st.Records)
		st.TrainAcc = float64(ep.right) / float64(st.Records)
	}
	return st, nil
}

// epochState is the progress of an epoch, which may span several streams.
type epochState struct {
	epoch   int
	lr      float64
	batch   int
	st      EpochStats
	lossSum float64
	right   int64
	inBatch int // records in the current mini-batch
}

func (t *Trainer) trainFile(ctx context.Context, ep *epochState, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("validator: epoch %d: %w", ep.epoch, err)
	}
	defer f.Close()
	if err := t.trainStream(ctx, ep, f); err != nil {
		return fmt.Errorf("%w (in %s)", err, path)
	}
	return nil
}

// trainStream trains on the records of one stream.
func (t *Trainer) trainStream(ctx context.Context, ep *epochState, r io.Reader) error {
	m := t.Model
	rr := records(&t.br, t.Decoder.Format(), r)
	for n := int64(0); ; n++ {
		if ep.st.Records%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rec, err := rr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("validator: epoch %d: record %d: %w", ep.epoch, n, rr.wrap(err))
		}
		if n == 0 {
			if err := t.Decoder.Begin(rr.Prologue()); err != nil {
				return fmt.Errorf("validator: epoch %d: %w", ep.epoch, err)
			}
		}
		var label int
		label, t.x, err = t.Decoder.Decode(rec, n, t.x[:0])
		if err != nil {
			return fmt.Errorf("validator: epoch %d: %w", ep.epoch, err)
		}
		if err := m.checkExample(t.x, label); err != nil {
			return fmt.Errorf("validator: epoch %d: record %d: %w", ep.epoch, n, err)
		}
		ep.st.Records++
		m.forward(t.x)
		loss, ok := m.lossGrad(label)
		ep.lossSum += loss
		if ok {
			ep.right++
		}
		if ep.batch == 1 {
			t.step(ep.lr, t.x)
			continue
		}
		t.accumulate(t.x)
		if ep.inBatch++; ep.inBatch == ep.batch {
			t.applyBatch(ep.lr, ep.inBatch)
			ep.inBatch = 0
		}
	}
}

// A Sequence is an epoch made of whole files read one after the other,
// such as the source files of a dataset in their order. The Trainer reads
// each with its own reader, so that the second file's CSV header or .npy
// header is not taken for a record; mini-batches run on across files.
// It is not read as a plain stream.
type Sequence struct {
	Paths []string
}

func (s *Sequence) Read([]byte) (int, error) {
	return 0, errors.New("validator: a Sequence is read by the Trainer file by file")
}

func (s *Sequence) Close() error { return nil }

// step applies the gradient of one record, whose features are x and whose
// loss gradient is in m.grad, with learning rate lr.
func (t *Trainer) step(lr float64, x []float32) {
	m := t.Model
	if t.L2 > 0 {
		scale(m.W, 1-lr*t.L2)
	}
	for k, g := range m.grad {
		if g == 0 {
			continue
		}
		row := m.W[k*m.dim : (k+1)*m.dim]
		row = row[:len(x)]
		c := lr * g
		for j, v := range x {
			row[j] -= c * float64(v)
		}
		m.B[k] -= c
	}
}

// accumulate adds the gradient of one record to the mini-batch sums.
func (t *Trainer) accumulate(x []float32) {
	m := t.Model
	for k, g := range m.grad {
		if g == 0 {
			continue
		}
		row := t.gradW[k*m.dim : (k+1)*m.dim]
		row = row[:len(x)]
		for j, v := range x {
			row[j] += g * float64(v)
		}
		t.gradB[k] += g
	}
}

// applyBatch applies the mean gradient of the n records summed so far, with
// learning rate lr, and clears the sums.
func (t *Trainer) applyBatch(lr float64, n int) {
	m := t.Model
	if t.L2 > 0 {
		scale(m.W, 1-lr*t.L2)
	}
	c := lr / float64(n)
	for i, g := range t.gradW {
		m.W[i] -= c * g
	}
	for k, g := range t.gradB {
		m.B[k] -= c * g
	}
	clear(t.gradW)
	clear(t.gradB)
}

func scale(v []float64, f float64) {
	for i := range v {
		v[i] *= f
	}
}

// Train runs epochs epochs: for each, it trains on the stream that open
// returns for it (closing it after) and then evaluates the model on test.
// An Epoch's Seconds is the time of its training pass, reading included,
// not of the evaluation. The result is labelled with strategy.
func (t *Trainer) Train(ctx context.Context, strategy string, epochs int, open func(epoch int) (io.ReadCloser, error), test *TestSet) (Run, error) {
	run := Run{Strategy: strategy, Epochs: []Epoch{}}
	for e := range epochs {
		start := time.Now()
		r, err := open(e)
		if err != nil {
			return run, fmt.Errorf("validator: %s: opening epoch %d: %w", strategy, e, err)
		}
		st, err := t.TrainEpoch(ctx, e, r)
		cerr := r.Close()
		if err != nil {
			return run, fmt.Errorf("validator: %s: %w", strategy, err)
		}
		if cerr != nil {
			return run, fmt.Errorf("validator: %s: closing epoch %d: %w", strategy, e, cerr)
		}
		secs := time.Since(start).Seconds()
		_, acc, err := t.Model.Evaluate(test)
		if err != nil {
			return run, fmt.Errorf("validator: %s: epoch %d: %w", strategy, e, err)
		}
		ep := Epoch{Epoch: e, TrainLoss: st.TrainLoss, TrainAcc: st.TrainAcc, TestAcc: acc, Seconds: secs}
		run.Epochs = append(run.Epochs, ep)
		if t.Logger != nil {
			t.Logger.Info("epoch done", "strategy", strategy, "epoch", e, "records", st.Records,
				"train_loss", ep.TrainLoss, "train_acc", ep.TrainAcc, "test_acc", ep.TestAcc, "seconds", ep.Seconds)
		}
	}
	return run, nil
}

// A TestSet is a set of decoded records held in memory as a dense matrix.
type TestSet struct {
	Dim    int       // features per record
	X      []float32 // Len() rows of Dim features, row after row
	Labels []int     // the label of each row
}

// Len returns the number of records.
func (ts *TestSet) Len() int { return len(ts.Labels) }

// Row returns the features of record i.
func (ts *TestSet) Row(i int) []float32 { return ts.X[i*ts.Dim : (i+1)*ts.Dim] }

// Classes returns one more than the largest label, the number of classes
// the records show.
func (ts *TestSet) Classes() int {
	n := 0
	for _, l := range ts.Labels {
		n = max(n, l+1)
	}
	return n
}

// LoadTestSet reads the files paths, of the Decoder's format, and decodes
// all their records with dec. Every record must have as many features as
// the first.
func LoadTestSet(dec Decoder, paths ...string) (*TestSet, error) {
	ts := &TestSet{}
	var br *bufio.Reader
	for _, path := range paths {
		if err := ts.load(&br, dec, path); err != nil {
			return nil, fmt.Errorf("validator: test set %s: %w", path, err)
		}
	}
	return ts, nil
}

func (ts *TestSet) load(br **bufio.Reader, dec Decoder, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rr := records(br, dec.Format(), f)
	for i := int64(0); ; i++ {
		rec, err := rr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record %d: %w", i, rr.wrap(err))
		}
		if i == 0 {
			if err := dec.Begin(rr.Prologue()); err != nil {
				return err
			}
		}
		n := len(ts.X)
		label, x, err := dec.Decode(rec, i, ts.X)
		if err != nil {
			return err
		}
		if len(ts.Labels) == 0 {
			ts.Dim = len(x) - n
		}
		if len(x)-n != ts.Dim {
			return fmt.Errorf("record %d: %d features, the first record has %d", i, len(x)-n, ts.Dim)
		}
		ts.X = x
		ts.Labels = append(ts.Labels, label)
	}
}

// records returns a reader of the records of r in format f, through the
// read buffer *br, which it makes on first use.
func records(br **bufio.Reader, f formats.Format, r io.Reader) *recordReader {
	if *br == nil {
		*br = bufio.NewReaderSize(r, readBufSize)
	} else {
		(*br).Reset(r)
	}
	rr := &recordReader{br: *br}
	rr.RecordReader = f.NewReader(rr)
	return rr
}

// recordReader is the format's RecordReader over a buffered stream, which
// counts the bytes it consumed so that a read error can say where it
// happened.
type recordReader struct {
	formats.RecordReader
	br  *bufio.Reader
	off int64
}

func (r *recordReader) Read(p []byte) (int, error) {
	n, err := r.br.Read(p)
	r.off += int64(n)
	return n, err
}

// wrap adds the stream offset to a read error; the format's errors
// (*formats.CorruptError) already have theirs.
func (r *recordReader) wrap(err error) error {
	var ce *formats.CorruptError
	if errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("reading at offset %d: %w", r.off, err)
}
