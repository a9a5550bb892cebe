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

// interleave returns the records that lock-step steps of per records of
// each part take, in the order they are taken, for steps steps, and a last
// step of the same number left in every part if the parts have it.
func interleave(parts [][]rec, per, steps int) []rec {
	var out []rec
	for s := range steps {
		for _, p := range parts {
			out = append(out, p[s*per:min((s+1)*per, len(p))]...)
		}
	}
	return out
}

func TestLockStepStepsTakeBatchOverKRecordsOfEveryPartUntilTheShortestEnds(t *testing.T) {
	all := separable(40, 3, 11)
	for _, c := range []struct {
		name              string
		lens              []int
		steps             int // steps taken
		records, dropped  int64
		interleavedRounds int // steps of the equivalent single stream, the last maybe short
	}{
		// Shortest part 7: 3 full steps of 2 records each; the 4th step
		// finds 2, 1 and 2 records and is dropped.
		{"unequal", []int{10, 7, 9}, 3, 18, 5, 3},
		// Equal parts end with a short step of 1 record each (as
		// --equal-parts mounts give).
		{"equal", []int{7, 7, 7}, 4, 21, 0, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var parts [][]rec
			var streams [][]byte
			off := 0
			for _, n := range c.lens {
				parts = append(parts, all[off:off+n])
				streams = append(streams, stream(all[off:off+n]))
				off += n
			}
			lock := newTrainer(t, Softmax, 2, 3, 0.1, 6)
			st, err := lock.TrainEpochParts(context.Background(), 0, readers(streams...))
			if err != nil {
				t.Fatal(err)
			}
			if st.Steps != int64(c.steps) || st.Records != c.records || st.Dropped != c.dropped {
				t.Errorf("steps %d, records %d, dropped %d; want %d, %d, %d", st.Steps, st.Records, st.Dropped, c.steps, c.records, c.dropped)
			}
			// One worker reading the records in the order the steps take
			// them, batch 6, makes exactly the same updates.
			one := newTrainer(t, Softmax, 2, 3, 0.1, 6)
			ost, err := one.TrainEpoch(context.Background(), 0, bytes.NewReader(stream(interleave(parts, 2, c.interleavedRounds))))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(lock.Model.W, one.Model.W) || !slices.Equal(lock.Model.B, one.Model.B) || st.TrainLoss != ost.TrainLoss {
				t.Errorf("lock-step weights %v %v (loss %v), one stream of the steps' records %v %v (loss %v)",
					lock.Model.W, lock.Model.B, st.TrainLoss, one.Model.W, one.Model.B, ost.TrainLoss)
			}
		})
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

func TestSyncEveryOneEqualsSynchronousAveraging(t *testing.T) {
	all := separable(400, 3, 12)
	var streams [][]byte
	for i := range 4 {
		streams = append(streams, stream(all[i*100:(i+1)*100]))
	}
	for _, batch := range []int{4, 16} { // 1 and 4 records per part and step
		sync := newTrainer(t, Softmax, 2, 3, 0.2, batch)
		sync.L2 = 1e-3
		local := newTrainer(t, Softmax, 2, 3, 0.2, batch)
		local.L2, local.SyncEvery = 1e-3, 1
		a, b := trainParts(t, sync, 3, streams...), trainParts(t, local, 3, streams...)
		for i := range a {
			if math.Abs(a[i]-b[i]) > 1e-9*max(1, math.Abs(a[i])) {
				t.Fatalf("batch %d: parameter %d is %v with synchronous SGD, %v with --sync-every 1", batch, i, a[i], b[i])
			}
		}
		if slices.Equal(a, make([]float64, len(a))) {
			t.Fatalf("batch %d: the model did not train", batch)
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
	if last.Records != 300 || last.Steps != 38 || last.Dropped != 0 {
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
