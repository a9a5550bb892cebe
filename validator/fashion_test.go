package validator

import (
	"context"
	"github.com/corgifs/corgifs/internal/testenv"
	"io"
	"os"
	"testing"

	"github.com/corgifs/corgifs/datagen"
)

// openAll returns an open function for Trainer.Train that serves the
// files one after the other, the same order every epoch.
func openAll(paths []string) func(int) (io.ReadCloser, error) {
	return func(int) (io.ReadCloser, error) {
		var rs []io.Reader
		var fs []*os.File
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				closeAll(fs)
				return nil, err
			}
			rs = append(rs, f)
			fs = append(fs, f)
		}
		return files{io.MultiReader(rs...), fs}, nil
	}
}

type files struct {
	io.Reader
	fs []*os.File
}

func (f files) Close() error { return closeAll(f.fs) }

func closeAll(fs []*os.File) error {
	var first error
	for _, f := range fs {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func TestSoftmaxOnRealFashionMNISTConvergesOnlyWhenShuffled(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on 60000 real images; skipped with -short")
	}
	if _, err := os.Stat(datagen.DefaultFashionDir); err != nil {
		testenv.Missing(t, "Fashion-MNIST is not installed (%v); apt-get install dataset-fashion-mnist", err)
	}
	// Test accuracy bounds after each epoch: softmax regression on raw
	// pixels, batch 64, learning rate 0.05, reaches about 0.80, 0.815 and
	// 0.82 on the shuffled order, and 0.10, 0.25, 0.32 on the clustered one.
	// Under the race detector an epoch takes over ten seconds, so only the
	// first is run.
	epochs := 3
	if raceDetector {
		epochs = 1
	}
	shuffledMin := []float64{0.78, 0.79, 0.80}
	clusteredMax := []float64{0.2, 0.4, 0.5}

	dec := ExampleDecoder{Label: datagen.LabelFeature, Features: datagen.ImageFeature}
	for _, clustered := range []bool{false, true} {
		train, test, err := datagen.FashionMNIST{Clustered: clustered, Files: 2, Seed: 1}.Write(context.Background(), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := LoadTestSet(dec, test.Files...)
		if err != nil {
			t.Fatal(err)
		}
		if ts.Len() != 10000 || ts.Dim != 784 || ts.Classes() != 10 {
			t.Fatalf("test set of %d records of %d features in %d classes", ts.Len(), ts.Dim, ts.Classes())
		}
		m, err := NewModel(Softmax, ts.Dim, 10)
		if err != nil {
			t.Fatal(err)
		}
		tr := &Trainer{Model: m, Decoder: dec, LR: 0.05, Batch: 64}
		run, err := tr.Train(context.Background(), "", epochs, openAll(train.Files), ts)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range run.Epochs {
			t.Logf("clustered=%v, epoch %d: train loss %.4f, train accuracy %.4f, test accuracy %.4f", clustered, e.Epoch, e.TrainLoss, e.TrainAcc, e.TestAcc)
			if !clustered && e.TestAcc <= shuffledMin[e.Epoch] {
				t.Errorf("shuffled order, epoch %d: test accuracy %.4f, want more than %.2f", e.Epoch, e.TestAcc, shuffledMin[e.Epoch])
			}
			if clustered && e.TestAcc >= clusteredMax[e.Epoch] {
				t.Errorf("clustered order, epoch %d: test accuracy %.4f, want less than %.2f", e.Epoch, e.TestAcc, clusteredMax[e.Epoch])
			}
		}
	}
}
