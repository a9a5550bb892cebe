package validator

import (
	"bytes"
	"context"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
)

// readers returns a reader of each stream.
func readers(streams ...[]byte) []io.Reader {
	var rs []io.Reader
	for _, s := range streams {
		rs = append(rs, bytes.NewReader(s))
	}
	return rs
}

// joinSteps returns the model after synchronous lock-step SGD on parts,
// per records a part a step, computed from the rule's statement rather
// than the Trainer's arithmetic: until the longest part ends, every step
// subtracts lr times the sum of the gradients of the records the parts
// give (per, or what is left), over Batch = per·K, or over their number
// if every part gives as many.
func joinSteps(t *testing.T, m *Model, parts [][]rec, per int, lr float64) {
	t.Helper()
	for s := 0; ; s++ {
		gw, gb := make([]float64, len(m.W)), make([]float64, len(m.B))
		var records []int
		for _, p := range parts {
			step := p[min(s*per, len(p)):min((s+1)*per, len(p))]
			records = append(records, len(step))
			for _, r := range step {
				m.forward(r.x)
				m.lossGrad(r.label)
				for c, g := range m.grad {
					for j, v := range r.x {
						gw[c*m.dim+j] += g * float64(v)
					}
					gb[c] += g
				}
			}
		}
		n := 0
		for _, r := range records {
			n += r
		}
		if n == 0 {
			return
		}
		div := float64(per * len(parts))
		if slices.Min(records) == slices.Max(records) {
			div = float64(n)
		}
		for i := range gw {
			m.W[i] -= lr * gw[i] / div
		}
		for i := range gb {
			m.B[i] -= lr * gb[i] / div
		}
	}
}

// TestLockStepWorkersTrainEveryRecordOfAnEpochWhenPartsAreUneven: K parts
// of unequal length (as parts balanced by bytes are) are trained on to
// their last record, as DDP's Join does: the steps go on until the longest
// part ends, a part that ran short gives what it has, an ended one a zero
// gradient, and every record of such an uneven step weighs 1/Batch, as in
// a full step, so that the last records of the longest parts do not get
// larger steps.
func TestLockStepWorkersTrainEveryRecordOfAnEpochWhenPartsAreUneven(t *testing.T) {
	all := separable(40, 3, 11)
	for _, c := range []struct {
		name  string
		lens  []int
		steps int
	}{
		// Steps 1–3 take 2 records of each part (6), step 4 takes 2, 1
		// and 2 (part 1 ends), step 5 takes 2 and 1 of parts 0 and 2.
		{"unequal", []int{10, 7, 9}, 5},
		// One part ends at a step boundary, one is empty.
		{"one part empty", []int{4, 0, 9}, 5},
		// Equal parts end with a short step of 1 record each (as
		// --equal-parts mounts give), the mean of its 3 records.
		{"equal", []int{7, 7, 7}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var parts [][]rec
			var streams [][]byte
			records, off := 0, 0
			for _, n := range c.lens {
				parts = append(parts, all[off:off+n])
				streams = append(streams, stream(all[off:off+n]))
				off += n
				records += n
			}
			lock := newTrainer(t, Softmax, 2, 3, 0.1, 6)
			st, err := lock.TrainEpochParts(context.Background(), 0, readers(streams...))
			if err != nil {
				t.Fatal(err)
			}
			if st.Records != int64(records) || st.Steps != int64(c.steps) {
				t.Errorf("parts of %v records: trained on %d records in %d steps; want every record, %d, in %d steps",
					c.lens, st.Records, st.Steps, records, c.steps)
			}
			want, _ := NewModel(Softmax, 2, 3)
			joinSteps(t, want, parts, 2, 0.1)
			got := append(slices.Clone(lock.Model.W), lock.Model.B...)
			for i, w := range append(slices.Clone(want.W), want.B...) {
				if math.Abs(got[i]-w) > 1e-12 {
					t.Fatalf("parameter %d is %v, want %v: lock-step weights %v %v, the rule's %v %v",
						i, got[i], w, lock.Model.W, lock.Model.B, want.W, want.B)
				}
			}
		})
	}
}

// TestLockStepOnEqualPartsIsOneStreamOfTheStepsRecords: parts of equal
// length (as --equal-parts mounts give) make, bit for bit, the updates of
// one worker reading the steps' records in the order the steps take them,
// the last step short.
func TestLockStepOnEqualPartsIsOneStreamOfTheStepsRecords(t *testing.T) {
	all := separable(21, 3, 11)
	parts := [][]rec{all[:7], all[7:14], all[14:]}
	lock := newTrainer(t, Softmax, 2, 3, 0.1, 6)
	st, err := lock.TrainEpochParts(context.Background(), 0, readers(stream(parts[0]), stream(parts[1]), stream(parts[2])))
	if err != nil {
		t.Fatal(err)
	}
	var steps []rec
	for s := range 4 {
		for _, p := range parts {
			steps = append(steps, p[s*2:min((s+1)*2, len(p))]...)
		}
	}
	one := newTrainer(t, Softmax, 2, 3, 0.1, 6)
	ost, err := one.TrainEpoch(context.Background(), 0, bytes.NewReader(stream(steps)))
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != 4 || ost.Steps != 4 || !slices.Equal(lock.Model.W, one.Model.W) || !slices.Equal(lock.Model.B, one.Model.B) || st.TrainLoss != ost.TrainLoss {
		t.Errorf("lock-step: %d steps, weights %v %v (loss %v); one stream of the steps' records: %d steps, %v %v (loss %v)",
			st.Steps, lock.Model.W, lock.Model.B, st.TrainLoss, ost.Steps, one.Model.W, one.Model.B, ost.TrainLoss)
	}
}

func TestBatchMustBeAMultipleOfTheParts(t *testing.T) {
	tr := newTrainer(t, Softmax, 2, 3, 0.1, 5)
	s := stream(separable(10, 3, 1))
	_, err := tr.TrainEpochParts(context.Background(), 0, readers(s, s))
	if err == nil || !strings.Contains(err.Error(), "Batch 5 is not a multiple of the 2 parts") {
		t.Errorf("err = %v, want the batch and the parts named", err)
	}
}

// trainParts trains for epochs epochs on the same parts every epoch and
// returns the weights and biases.
func trainParts(t *testing.T, tr *Trainer, epochs int, streams ...[]byte) []float64 {
	t.Helper()
	for e := range epochs {
		if _, err := tr.TrainEpochParts(context.Background(), e, readers(streams...)); err != nil {
			t.Fatal(err)
		}
	}
	return append(slices.Clone(tr.Model.W), tr.Model.B...)
}

// TestSyncEveryOneEqualsSynchronousAveraging: local SGD averaging the
// workers' models after every step is synchronous SGD, also on parts of
// unequal length, whose workers run out one by one at the end of the
// epoch and step with a zero gradient.
func TestSyncEveryOneEqualsSynchronousAveraging(t *testing.T) {
	all := separable(400, 3, 12)
	for _, lens := range [][]int{{100, 100, 100, 100}, {100, 93, 110, 97}} {
		var streams [][]byte
		off := 0
		for _, n := range lens {
			streams = append(streams, stream(all[off:off+n]))
			off += n
		}
		for _, batch := range []int{4, 16} { // 1 and 4 records per part and step
			sync := newTrainer(t, Softmax, 2, 3, 0.2, batch)
			sync.L2 = 1e-3
			local := newTrainer(t, Softmax, 2, 3, 0.2, batch)
			local.L2, local.SyncEvery = 1e-3, 1
			a, b := trainParts(t, sync, 3, streams...), trainParts(t, local, 3, streams...)
			for i := range a {
				if math.Abs(a[i]-b[i]) > 1e-9*max(1, math.Abs(a[i])) {
					t.Fatalf("parts of %v, batch %d: parameter %d is %v with synchronous SGD, %v with --sync-every 1", lens, batch, i, a[i], b[i])
				}
			}
			if slices.Equal(a, make([]float64, len(a))) {
				t.Fatalf("batch %d: the model did not train", batch)
			}
		}
	}
}

func TestLocalSGDAveragesTheWorkersModelsAtTheEndOfTheEpoch(t *testing.T) {
	// With more steps between averages than an epoch has, each worker
	// trains alone on its part and the epoch ends with the mean model.
	parts := [][]rec{separable(30, 3, 13), separable(30, 3, 14), separable(30, 3, 15)}
	local := newTrainer(t, Softmax, 2, 3, 0.1, 6)
	local.SyncEvery = 1000
	got := trainParts(t, local, 1, stream(parts[0]), stream(parts[1]), stream(parts[2]))
	want := make([]float64, len(got))
	for _, p := range parts {
		alone := newTrainer(t, Softmax, 2, 3, 0.1, 2)
		for i, v := range trainParts(t, alone, 1, stream(p)) {
			want[i] += v / 3
		}
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("parameter %d is %v, want the mean of the workers' models %v", i, got[i], want[i])
		}
	}
}

func TestTrainSetEvaluatesTheFinalModelOnEveryTrainingRecord(t *testing.T) {
	recs := separable(300, 3, 16)
	data := stream(recs)
	tr := newTrainer(t, Softmax, 2, 3, 0.1, 8)
	tr.TrainSet = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	run, err := tr.Train(context.Background(), "full", 2, func(int) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, testSetOf(recs[:50]))
	if err != nil {
		t.Fatal(err)
	}
	loss, acc, err := tr.Model.Evaluate(testSetOf(recs))
	if err != nil {
		t.Fatal(err)
	}
	last := run.Epochs[1]
	if last.FullTrainLoss != loss || last.FullTrainAcc != acc {
		t.Errorf("full training set: loss %v accuracy %v, want the final model's %v %v", last.FullTrainLoss, last.FullTrainAcc, loss, acc)
	}
	// The running measures are of the model as it trained, not the final one.
	if last.TrainLoss == last.FullTrainLoss {
		t.Errorf("running loss %v equals the final model's", last.TrainLoss)
	}
	if last.Records != 300 || last.Steps != 38 {
		t.Errorf("epoch %+v: want 300 records in 38 steps", last)
	}
}

func TestLockStepTrainingDoesNotAllocatePerRecord(t *testing.T) {
	for _, syncEvery := range []int{0, 3} {
		tr := newTrainer(t, Softmax, 2, 3, 0.01, 8)
		tr.SyncEvery = syncEvery
		allocs := func(n int) float64 {
			var parts [][]byte
			for i := range 4 {
				parts = append(parts, stream(separable(n, 3, uint64(i))))
			}
			rs := make([]*bytes.Reader, 4)
			ios := make([]io.Reader, 4)
			return testing.AllocsPerRun(5, func() {
				for i := range rs {
					rs[i] = bytes.NewReader(parts[i])
					ios[i] = rs[i]
				}
				if _, err := tr.TrainEpochParts(context.Background(), 0, ios); err != nil {
					t.Fatal(err)
				}
			})
		}
		if a, b := allocs(200), allocs(2000); b > a || b > 20 {
			t.Errorf("sync every %d: %v allocations for 4×200 records, %v for 4×2000; want a few per part, not growing", syncEvery, a, b)
		}
	}
}
