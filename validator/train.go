package validator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"
)

// DefaultDecay is the per-epoch learning-rate decay of the CorgiPile paper's
// experiments (Xu et al., SIGMOD 2022).
const DefaultDecay = 0.95

const (
	readBufSize = 1 << 20 // read buffer of a stream
	checkEvery  = 1024    // records between context checks
)

// A Trainer trains a Model by stochastic gradient descent, one pass over a
// stream of records per epoch, or over the K parts of an epoch read in
// lock-step as K data-parallel workers (DDP ranks) would.
//
// With Batch 1 it is plain SGD: every record updates the model. With a
// larger Batch it is mini-batch SGD: each update uses the mean gradient of
// Batch records (the last batch of an epoch may be smaller). The learning
// rate of epoch e is LR·Decay^e. With L2 > 0 every update also adds L2·w to
// the gradient of each weight w (not of the biases).
//
// With K parts (TrainEpochParts) every step takes Batch/K records from each
// part, so Batch must be a multiple of K. SyncEvery 0 is synchronous SGD:
// the step's K·(Batch/K) gradients are averaged into one update of Model,
// exactly the update of one batch of those records. SyncEvery H ≥ 1 is local
// SGD (periodic model averaging): every worker keeps its own copy of the
// model and updates it with the mean gradient of its own Batch/K records,
// and every H steps, and at the end of every epoch, the K copies are
// averaged into Model.
//
// An epoch trains on every record of every part, whatever their lengths, as
// PyTorch DDP's uneven-inputs Join does: the steps go on until the longest
// part is consumed; in a step a part that has fewer than Batch/K records
// left gives what it has, and one that has ended contributes a zero
// gradient. In such an uneven step every record weighs 1/Batch, as in a
// full step: the update is the sum of the step's gradients over Batch (the
// equal weight that DDP's Join documents for its default,
// divide_by_initial_world_size). A larger weight, such as the mean over
// the records the step got, gives the few last records of the longest
// parts up to Batch times a record's usual step, and the final model leans
// to them: on Fashion-MNIST at K = 8 (seed 1) corgipile's full-set loss,
// its parts a block apart, ended 2.8% over full's, whose parts are a record
// apart (VALIDATION.md, "How K workers end an epoch"). A step in which every
// part gives the same n < Batch/K records (the last of parts of equal
// length, as --equal-parts and one part give) is the mean over its nK
// records, as a short last batch is, and trains bit for bit as before
// this rule. With local SGD a worker steps with the sum of its records'
// gradients over Batch/K in an uneven step, a worker whose part has
// ended with a zero gradient (its L2 term only), and the models are
// averaged as always, so that SyncEvery 1 stays synchronous SGD.
//
// The fields are read at every epoch; a Trainer keeps reused buffers
// between epochs and must not be used by several goroutines at once.
type Trainer struct {
	Model   *Model
	Decoder Decoder
	LR      float64 // learning rate of epoch 0, > 0
	Decay   float64 // learning-rate factor per epoch, in (0, 1]; 0 means DefaultDecay
	L2      float64 // L2 regularisation strength, ≥ 0
	Batch   int     // records per update, over all parts; 0 means 1

	// SyncEvery is 0 for synchronous SGD over the parts of an epoch, or H
	// ≥ 1 for local SGD averaging the workers' models every H steps. It
	// changes nothing with one part.
	SyncEvery int

	// TrainSet, if not nil, opens the full training set (such as a
	// Sequence of the source files); after every epoch Train evaluates the
	// model on all of it, as the CorgiPile paper's tables report, and not
	// only the running mean over the epoch (EpochStats).
	TrainSet func() (io.ReadCloser, error)

	// Logger, if not nil, gets one Info line per epoch from Train.
	Logger *slog.Logger

	// Feedback, if not nil (with Gradients), receives after every epoch
	// each part's per-example gradient vectors (Gradients) in served
	// order, before the next epoch is opened: the input of an order
	// server (corgifs --strategy grab, cdgrab, corgipile-balance). Every
	// record a part served gets a vector, at the model of the step that
	// trained on it.
	Feedback  Feedback
	Gradients *Gradients

	parts []*part // the readers of the parts of an epoch, reused
	eval  part    // the reader of TrainSet
	gradW []float64
	gradB []float64
}

// EpochStats describes one training epoch. The loss and accuracy of each
// record are measured before the update that uses it, so they track
// training as it happens, at no extra cost.
type EpochStats struct {
	Records   int64   // records trained on, over all parts
	TrainLoss float64 // mean loss of the records (without the L2 term)
	TrainAcc  float64 // share of the records the model predicted right
	Steps     int64   // updates (lock-step steps over all parts)
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
		return errors.New("the Trainer has no Model")
	case t.Decoder == nil:
		return errors.New("the Trainer has no Decoder")
	case !(t.LR > 0) || math.IsInf(t.LR, 0):
		return fmt.Errorf("LR must be a positive number, got %v", t.LR)
	case t.Decay < 0 || t.Decay > 1 || math.IsNaN(t.Decay):
		//lint:ignore ST1005 Decay is the name of the field
		return fmt.Errorf("Decay must be in (0, 1] (0 for the default %v), got %v", DefaultDecay, t.Decay)
	case t.L2 < 0 || math.IsNaN(t.L2) || math.IsInf(t.L2, 0):
		return fmt.Errorf("L2 must be a non-negative number, got %v", t.L2)
	case t.Batch < 0:
		return fmt.Errorf("validator: Batch must not be negative, got %d", t.Batch)
	case t.SyncEvery < 0:
		return fmt.Errorf("validator: SyncEvery must not be negative, got %d", t.SyncEvery)
	case (t.Feedback == nil) != (t.Gradients == nil):
		return errors.New("validator: Feedback and Gradients go together: the vectors and where they go")
	case t.Gradients != nil && (t.Gradients.outputs != t.Model.Outputs() || t.Gradients.in != t.Model.Dim()):
		return fmt.Errorf("validator: Gradients are of a model of %d×%d weights, the Model has %d×%d",
			t.Gradients.outputs, t.Gradients.in, t.Model.Outputs(), t.Model.Dim())
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
	return t.TrainEpochParts(ctx, epoch, []io.Reader{r})
}

// TrainEpochParts trains the model for one epoch on the K parts of the
// epoch read in lock-step, each step taking Batch/K records of every part
// (see Trainer). The parts share the Decoder: being parts of one dataset,
// their prologues (CSV header, .npy dtype) set it up alike.
func (t *Trainer) TrainEpochParts(ctx context.Context, epoch int, parts []io.Reader) (EpochStats, error) {
	if err := t.check(); err != nil {
		return EpochStats{}, err
	}
	k := len(parts)
	batch := max(t.Batch, 1)
	switch {
	case k == 0:
		return EpochStats{}, errors.New("validator: an epoch needs at least one part")
	case batch%k != 0:
		return EpochStats{}, fmt.Errorf("validator: Batch %d is not a multiple of the %d parts: every step takes Batch/K records of each part", batch, k)
	}
	m := t.Model
	ep := epochState{lr: t.LearningRate(epoch), batch: batch, perPart: batch / k, epoch: epoch, local: t.SyncEvery > 0 && k > 1}
	t.setParts(parts, ep.local)
	defer t.closeParts()
	if !ep.local && ep.batch > 1 && len(t.gradW) != len(m.W) {
		t.gradW = make([]float64, len(m.W))
		t.gradB = make([]float64, len(m.B))
	}
	for {
		n, err := t.fillParts(ctx, &ep)
		if err != nil {
			return EpochStats{}, err
		}
		if n == 0 {
			break
		}
		if ep.local {
			t.localStep(&ep)
		} else {
			t.syncStep(&ep, n)
		}
		if t.partsEnded() {
			break
		}
	}
	if ep.local && ep.sinceSync > 0 {
		t.average()
	}
	if t.feedbackOn() {
		if err := t.writeFeedback(&ep); err != nil {
			return EpochStats{}, err
		}
	}
	st := ep.st
	if st.Records > 0 {
		st.TrainLoss = ep.lossSum / float64(st.Records)
		st.TrainAcc = float64(ep.right) / float64(st.Records)
	}
	return st, nil
}

// epochState is the progress of an epoch.
type epochState struct {
	epoch     int
	lr        float64
	batch     int  // records per step over all parts
	perPart   int  // records per step of each part
	local     bool // local SGD: each part's worker has its own model
	sinceSync int  // local steps since the models were last averaged
	read      int64
	st        EpochStats
	lossSum   float64
	right     int64
}

// setParts prepares a reader per part, and with local SGD a copy of the
// model per worker.
func (t *Trainer) setParts(rs []io.Reader, local bool) {
	for len(t.parts) < len(rs) {
		t.parts = append(t.parts, &part{})
	}
	t.parts = t.parts[:len(rs)]
	for i, r := range rs {
		p := t.parts[i]
		p.reset(t, r, i, len(rs))
		if local {
			p.copyModel(t.Model)
		}
	}
}

func (t *Trainer) closeParts() {
	for _, p := range t.parts {
		p.close()
	}
}

// fillParts reads the records of the next step from every part, Batch/K
// or what is left of it, and returns how many they give in all: 0 when the
// epoch is over.
func (t *Trainer) fillParts(ctx context.Context, ep *epochState) (int, error) {
	n := 0
	for _, p := range t.parts {
		if err := p.fill(ctx, t, ep, ep.perPart); err != nil {
			return 0, err
		}
		n += len(p.labels)
	}
	return n, nil
}

// partsEnded reports whether every part has given all its records.
func (t *Trainer) partsEnded() bool {
	for _, p := range t.parts {
		if !p.eof {
			return false
		}
	}
	return true
}

// partsEven reports whether every part gave the step as many records.
func (t *Trainer) partsEven() bool {
	for _, p := range t.parts {
		if len(p.labels) != len(t.parts[0].labels) {
			return false
		}
	}
	return true
}

// syncStep applies one update of Model: the sum of the gradients of the n
// records the parts gave the step, over n if every part gave as many,
// else over Batch (see Trainer).
func (t *Trainer) syncStep(ep *epochState, n int) {
	m := t.Model
	fb := t.feedbackOn()
	for _, p := range t.parts {
		for i, label := range p.labels {
			x := p.row(i, m.dim)
			t.example(ep, m, x, label)
			if fb {
				t.record(p, m, x)
			}
			if ep.batch == 1 {
				t.step(m, ep.lr, x)
				continue
			}
			accumulate(m, t.gradW, t.gradB, x)
		}
	}
	if ep.batch > 1 {
		if !t.partsEven() {
			n = ep.batch
		}
		t.applyBatch(m, ep.lr, n, t.gradW, t.gradB)
	}
	ep.st.Steps++
}

// localStep updates every worker's model with the sum of the gradients of
// its own records of the step over their number, or over Batch/K in an
// uneven step (a zero gradient if its part has ended), and averages the
// models every SyncEvery steps.
func (t *Trainer) localStep(ep *epochState) {
	fb := t.feedbackOn()
	even := t.partsEven()
	for _, p := range t.parts {
		m := p.model
		if len(p.labels) == 0 {
			if t.L2 > 0 {
				scale(m.W, 1-ep.lr*t.L2)
			}
			continue
		}
		for i, label := range p.labels {
			x := p.row(i, m.dim)
			t.example(ep, m, x, label)
			if fb {
				t.record(p, m, x)
			}
			if ep.perPart == 1 {
				t.step(m, ep.lr, x)
				continue
			}
			accumulate(m, p.gradW, p.gradB, x)
		}
		if ep.perPart > 1 {
			n := len(p.labels)
			if !even {
				n = ep.perPart
			}
			t.applyBatch(m, ep.lr, n, p.gradW, p.gradB)
		}
	}
	ep.st.Steps++
	if ep.sinceSync++; ep.sinceSync == t.SyncEvery {
		t.average()
		ep.sinceSync = 0
	}
}

// example computes the loss of one record and its gradient with respect
// to the scores (in m.grad), and counts it in the epoch's running
// measures. The gradient with respect to the weights is m.grad ⊗ x, which
// the caller applies or accumulates: a per-example gradient hook (for
// gradient-balanced orders) belongs right after this call.
func (t *Trainer) example(ep *epochState, m *Model, x []float32, label int) {
	ep.st.Records++
	m.forward(x)
	loss, ok := m.lossGrad(label)
	ep.lossSum += loss
	if ok {
		ep.right++
	}
}

// average sets Model, and every worker's copy, to the mean of the
// workers' models.
func (t *Trainer) average() {
	m := t.Model
	inv := 1 / float64(len(t.parts))
	for i := range m.W {
		var s float64
		for _, p := range t.parts {
			s += p.model.W[i]
		}
		m.W[i] = s * inv
	}
	for i := range m.B {
		var s float64
		for _, p := range t.parts {
			s += p.model.B[i]
		}
		m.B[i] = s * inv
	}
	for _, p := range t.parts {
		copy(p.model.W, m.W)
		copy(p.model.B, m.B)
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

// step applies the gradient of one record to m, whose features are x and
// whose loss gradient is in m.grad, with learning rate lr.
func (t *Trainer) step(m *Model, lr float64, x []float32) {
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

// accumulate adds the gradient of one record (m.grad ⊗ x) to the
// mini-batch sums gradW and gradB.
func accumulate(m *Model, gradW, gradB []float64, x []float32) {
	for k, g := range m.grad {
		if g == 0 {
			continue
		}
		row := gradW[k*m.dim : (k+1)*m.dim]
		row = row[:len(x)]
		for j, v := range x {
			row[j] += g * float64(v)
		}
		gradB[k] += g
	}
}

// applyBatch applies to m the mean gradient of the n records summed in
// gradW and gradB, with learning rate lr, and clears the sums.
func (t *Trainer) applyBatch(m *Model, lr float64, n int, gradW, gradB []float64) {
	if t.L2 > 0 {
		scale(m.W, 1-lr*t.L2)
	}
	c := lr / float64(n)
	for i, g := range gradW {
		m.W[i] -= c * g
	}
	for k, g := range gradB {
		m.B[k] -= c * g
	}
	clear(gradW)
	clear(gradB)
}

func scale(v []float64, f float64) {
	for i := range v {
		v[i] *= f
	}
}

// Train runs epochs epochs: for each, it trains on the stream that open
// returns for it (closing it after) and then evaluates the model on test
// (and on TrainSet). An Epoch's Seconds is the time of its training pass,
// reading included, not of the evaluation. The result is labelled with
// strategy.
func (t *Trainer) Train(ctx context.Context, strategy string, epochs int, open func(epoch int) (io.ReadCloser, error), test *TestSet) (Run, error) {
	return t.TrainParts(ctx, strategy, epochs, func(e int) ([]io.ReadCloser, error) {
		r, err := open(e)
		if err != nil {
			return nil, err
		}
		return []io.ReadCloser{r}, nil
	}, test)
}

// TrainParts is Train over the K parts of every epoch, read in lock-step
// (TrainEpochParts): open returns the parts of an epoch, which it closes
// after the epoch.
func (t *Trainer) TrainParts(ctx context.Context, strategy string, epochs int, open func(epoch int) ([]io.ReadCloser, error), test *TestSet) (Run, error) {
	run := Run{Strategy: strategy, Epochs: []Epoch{}}
	for e := range epochs {
		start := time.Now()
		rs, err := open(e)
		if err != nil {
			return run, fmt.Errorf("validator: %s: opening epoch %d: %w", strategy, e, err)
		}
		readers := make([]io.Reader, len(rs))
		for i, r := range rs {
			readers[i] = r
		}
		st, err := t.TrainEpochParts(ctx, e, readers)
		var cerr error
		for _, r := range rs {
			cerr = cmp.Or(cerr, r.Close())
		}
		if err != nil {
			return run, fmt.Errorf("validator: %s: %w", strategy, err)
		}
		if cerr != nil {
			return run, fmt.Errorf("validator: %s: closing epoch %d: %w", strategy, e, cerr)
		}
		secs := time.Since(start).Seconds()
		if len(rs) > 1 {
			run.Workers = len(rs)
			run.SyncEvery = t.SyncEvery
		}
		testLoss, acc, err := t.Model.Evaluate(test)
		if err != nil {
			return run, fmt.Errorf("validator: %s: epoch %d: %w", strategy, e, err)
		}
		ep := Epoch{Epoch: e, TrainLoss: st.TrainLoss, TrainAcc: st.TrainAcc, TestAcc: acc, Seconds: secs,
			TestLoss: testLoss, Records: st.Records, Steps: st.Steps}
		if t.TrainSet != nil {
			ep.FullTrainLoss, ep.FullTrainAcc, err = t.evaluateTrainSet(ctx, e)
			if err != nil {
				return run, fmt.Errorf("validator: %s: %w", strategy, err)
			}
		}
		run.Epochs = append(run.Epochs, ep)
		if t.Logger != nil {
			t.Logger.Info("epoch done", "strategy", strategy, "epoch", e, "records", st.Records,
				"train_loss", ep.TrainLoss, "train_acc", ep.TrainAcc, "full_train_loss", ep.FullTrainLoss,
				"full_train_acc", ep.FullTrainAcc, "test_acc", ep.TestAcc, "seconds", ep.Seconds)
		}
	}
	return run, nil
}

// evaluateTrainSet returns the mean loss and the accuracy of the model on
// every record of TrainSet: a full pass with the weights fixed.
func (t *Trainer) evaluateTrainSet(ctx context.Context, epoch int) (loss, acc float64, err error) {
	r, err := t.TrainSet()
	if err != nil {
		return 0, 0, fmt.Errorf("epoch %d: opening the training set: %w", epoch, err)
	}
	defer r.Close()
	m := t.Model
	p := &t.eval
	p.reset(t, r, 0, 1)
	defer p.close()
	ep := epochState{epoch: epoch}
	var n, right int64
	for {
		if err := p.fill(ctx, t, &ep, evalChunk); err != nil {
			return 0, 0, fmt.Errorf("evaluating the training set: %w", err)
		}
		for i, label := range p.labels {
			m.forward(p.row(i, m.dim))
			l, ok := m.lossGrad(label)
			loss += l
			if ok {
				right++
			}
		}
		n += int64(len(p.labels))
		if len(p.labels) < evalChunk {
			break
		}
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("epoch %d: the training set has no records", epoch)
	}
	return loss / float64(n), float64(right) / float64(n), nil
}

// evalChunk is how many records evaluateTrainSet decodes at a time.
const evalChunk = 256
