package tune

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/tfexample"
	"golang.org/x/sys/unix"
)

// writeSet writes s as one TFRecord file of tf.train.Example records
// ("y" the label, "x" the features), flushed and dropped from the page
// cache, and returns its index cut into blocks of about block bytes.
func writeSet(t *testing.T, s synth, block int64) *index.Index {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "a.tfrecord")
	var data []byte
	var b tfexample.Builder
	for i := range s.labels {
		b.Reset()
		b.Int64("y", s.labels[i])
		b.Float("x", s.x[i]...)
		data = formats.AppendFrame(data, b.AppendTo(nil))
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	f.Close()
	ix, err := index.Build(context.Background(), blocktest.Dir(t, dir, false), index.Options{BlockSize: block})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func cachedFile(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	c, ok := cachedRange(f, 0, fi.Size())
	if !ok {
		t.Skip("cannot tell what is in the page cache here")
	}
	return c * dioAlign
}

// Data reads the blocks of the index, with the same estimates as the
// blocks given to an Analysis by hand, and leaves blocks that were cold
// out of the page cache, so that a storage probe or a benchmark run after
// it still meets a cold source.
func TestDataMatchesTheAnalysisAndLeavesColdBlocksUncached(t *testing.T) {
	s := clusters(4000, 4, 6, 1, 9)
	ix := writeSet(t, s, 16<<10)
	path := ix.Path(0)
	if c := cachedFile(t, path); c > 64<<10 {
		t.Skipf("%d bytes of the file stayed in the page cache after FADV_DONTNEED", c)
	}
	rep, err := Data(context.Background(), ix, TFExample{Label: "y", Features: "x"}, DataOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAnalysis()
	var r int
	for _, blk := range ix.Blocks {
		a.StartBlock()
		for range blk.Records {
			a.Record(s.labels[r], s.x[r])
			r++
		}
		a.EndBlock()
	}
	want, _ := a.Report(7)
	want.BlocksInAll = len(ix.Blocks)
	if rep.Mix == nil || rep.Mix.ExpectedTV(4) != a.Mix(len(ix.Blocks), 7).ExpectedTV(4) {
		t.Errorf("Data's label mix %+v is not the analysis's", rep.Mix)
	}
	rep.Mix = nil
	if rep != want {
		t.Errorf("Data = %+v\nwant   %+v", rep, want)
	}
	if c := cachedFile(t, path); c > 64<<10 {
		t.Errorf("%d bytes of the file are in the page cache after Data, want none", c)
	}
}

// Beyond MaxBytes, Data reads a random sample of whole blocks.
func TestDataSamplesBlocksBeyondMaxBytes(t *testing.T) {
	s := clusters(20000, 4, 6, 1, 9)
	ix := writeSet(t, s, 8<<10)
	rep, err := Data(context.Background(), ix, TFExample{Label: "y"}, DataOptions{MaxBytes: ix.Bytes / 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.BlocksInAll != len(ix.Blocks) || rep.Blocks < len(ix.Blocks)/5 || rep.Blocks > len(ix.Blocks)/3 {
		t.Errorf("sampled %d of %d blocks for a quarter of the bytes", rep.Blocks, rep.BlocksInAll)
	}
	if rep.HD < 10 || rep.LabelTV < 0.65 {
		t.Errorf("the sample of a clustered order: h_D %.2f, TV %.3f", rep.HD, rep.LabelTV)
	}
}

// Data reads the blocks of a gzip-compressed file decompressed: the same
// report as for the stored file with the same blocks.
func TestDataReadsCompressedFilesDecompressed(t *testing.T) {
	s := clusters(3000, 4, 6, 1, 9)
	plain := writeSet(t, s, 16<<10)
	data, err := os.ReadFile(plain.Path(0))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(data)
	w.Close()
	if err := os.WriteFile(filepath.Join(dir, "a.tfrecord.gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ix, err := index.Build(context.Background(), blocktest.Dir(t, dir, false), index.Options{BlockSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Data(context.Background(), ix, TFExample{Label: "y", Features: "x"}, DataOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	a := NewAnalysis()
	var r int
	for _, blk := range ix.Blocks {
		a.StartBlock()
		for range blk.Records {
			a.Record(s.labels[r], s.x[r])
			r++
		}
		a.EndBlock()
	}
	want, _ := a.Report(7)
	want.BlocksInAll = len(ix.Blocks)
	rep.Mix = nil
	if rep != want {
		t.Errorf("Data = %+v\nwant   %+v", rep, want)
	}
}
