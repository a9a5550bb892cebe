package validator

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/formats"
)

// formatDecoder returns the decoder of the files datagen writes in format,
// with dim features.
func formatDecoder(format string, dim int) Decoder {
	switch format {
	case datagen.FormatCSV:
		return &CSVDecoder{Ignore: []string{"id"}}
	case datagen.FormatJSONL:
		return &JSONLDecoder{}
	case datagen.FormatLibSVM:
		return &LibSVMDecoder{Dim: dim}
	case datagen.FormatNPY:
		return &RowDecoder{Label: 0, Ignore: []int{1}}
	case datagen.FormatWDS:
		return &WDSDecoder{}
	}
	return ExampleDecoder{Label: datagen.LabelFeature, Features: datagen.ValueFeature}
}

// writeFormat writes s in format into a new directory.
func writeFormat(t *testing.T, s datagen.Synthetic, format string) []string {
	t.Helper()
	s.Format = format
	sum, err := s.Write(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return sum.Files
}

// TestEveryFormatTrainsLikeTFRecordInSourceOrder writes the same synthetic
// training and test sets in every format datagen has and trains the same
// model on each, reading the files in their order with the format's
// reader and decoder: the test sets must hold the same records and every
// epoch the same loss and accuracy as TFRecord's.
func TestEveryFormatTrainsLikeTFRecordInSourceOrder(t *testing.T) {
	const dim = 8
	train := datagen.Synthetic{Records: 3000, Features: dim, Classes: 4, Files: 3, Seed: 5}
	test := datagen.Synthetic{Records: 500, Features: dim, Classes: 4, Files: 2, Seed: 5, FirstID: 3000}
	type result struct {
		test *TestSet
		run  Run
	}
	results := map[string]result{}
	for _, format := range datagen.Formats() {
		dec := formatDecoder(format, dim)
		ts, err := LoadTestSet(dec, writeFormat(t, test, format)...)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		m, err := NewModel(Softmax, ts.Dim, 4)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		files := writeFormat(t, train, format)
		tr := &Trainer{Model: m, Decoder: dec, LR: 0.05, Batch: 16}
		run, err := tr.Train(context.Background(), format, 3, func(int) (io.ReadCloser, error) {
			return &Sequence{Paths: files}, nil
		}, ts)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		results[format] = result{ts, run}
	}
	want := results[datagen.FormatTFRecord]
	if want.test.Len() != 500 || want.test.Dim != dim {
		t.Fatalf("tfrecord test set: %d records of %d features", want.test.Len(), want.test.Dim)
	}
	if acc := want.run.Epochs[2].TestAcc; acc < 0.7 {
		t.Fatalf("tfrecord: test accuracy %.3f after 3 epochs: the model or data is broken", acc)
	}
	for format, got := range results {
		if !slices.Equal(got.test.X, want.test.X) || !slices.Equal(got.test.Labels, want.test.Labels) {
			t.Errorf("%s: the test set differs from tfrecord's", format)
		}
		for e, ep := range got.run.Epochs {
			w := want.run.Epochs[e]
			if math.Abs(ep.TrainLoss-w.TrainLoss) > 1e-9 || math.Abs(ep.TestAcc-w.TestAcc) > 1e-9 || ep.TrainAcc != w.TrainAcc {
				t.Errorf("%s epoch %d: loss %v, train acc %v, test acc %v; tfrecord: %v, %v, %v",
					format, e, ep.TrainLoss, ep.TrainAcc, ep.TestAcc, w.TrainLoss, w.TrainAcc, w.TestAcc)
			}
		}
	}
}

// TestFashionFormatsDecodeToTheSamePixels converts a tiny Fashion-MNIST
// into every format: every decoder gives the same scaled pixels and
// labels (the text formats' 0-255 pixels divided by 255).
func TestFashionFormatsDecodeToTheSamePixels(t *testing.T) {
	from := tinyFashion(t)
	var want *TestSet
	for _, c := range []struct {
		format string
		dec    Decoder
	}{
		{datagen.FormatTFRecord, ExampleDecoder{Label: datagen.LabelFeature, Features: datagen.ImageFeature}},
		{datagen.FormatWDS, &WDSDecoder{}},
		{datagen.FormatNPY, &RowDecoder{Label: 0}},
		{datagen.FormatCSV, &CSVDecoder{Ignore: []string{"id"}, Divide: 255}},
		{datagen.FormatJSONL, &JSONLDecoder{Divide: 255}},
		{datagen.FormatLibSVM, &LibSVMDecoder{Dim: 784, Divide: 255}},
	} {
		f := datagen.FashionMNIST{From: from, Files: 2, Seed: 3, Format: c.format}
		train, _, err := f.Write(context.Background(), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := LoadTestSet(c.dec, train.Files...)
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		if want == nil {
			want = ts
			if ts.Dim != 784 || ts.Len() != 20 {
				t.Fatalf("tfrecord: %d records of %d features", ts.Len(), ts.Dim)
			}
			continue
		}
		if !slices.Equal(ts.X, want.X) || !slices.Equal(ts.Labels, want.Labels) {
			t.Errorf("%s: records differ from tfrecord's", c.format)
		}
	}
}

// tinyFashion writes a Fashion-MNIST of 20 training and 10 test images of
// 28×28 pixels and returns its directory.
func tinyFashion(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, magic uint32, dims []uint32, data []byte) {
		var b []byte
		b = binaryBE(b, magic)
		for _, d := range dims {
			b = binaryBE(b, d)
		}
		b = append(b, data...)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		zw := gzip.NewWriter(f)
		if _, err := zw.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		images, labels string
		n              int
	}{{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 20}, {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10}} {
		pixels := make([]byte, s.n*784)
		for i := range pixels {
			pixels[i] = byte(i * 7 % 251)
		}
		labels := make([]byte, s.n)
		for i := range labels {
			labels[i] = byte(i % 10)
		}
		write(s.images, 0x803, []uint32{uint32(s.n), 28, 28}, pixels)
		write(s.labels, 0x801, []uint32{uint32(s.n)}, labels)
	}
	return dir
}

func binaryBE(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// TestDecoderErrorsSayWhatIsWrong feeds each decoder records it cannot
// use: the error names the record and what is wrong.
func TestDecoderErrorsSayWhatIsWrong(t *testing.T) {
	wds := func(members ...string) []byte {
		var b strings.Builder
		tw := tar.NewWriter(&b)
		for i := 0; i < len(members); i += 2 {
			tw.WriteHeader(&tar.Header{Name: members[i], Size: int64(len(members[i+1])), Mode: 0o644, Typeflag: tar.TypeReg})
			tw.Write([]byte(members[i+1]))
		}
		tw.Flush()
		return []byte(b.String())
	}
	npyHeader := func(descr string) []byte {
		return formats.NPY{}.AppendPrologue(nil, formats.Head{Key: []byte(descr + " (*, 3)")}, 1)
	}
	tests := []struct {
		name     string
		dec      Decoder
		prologue []byte
		record   []byte
		want     string
	}{
		{"csv label column missing", &CSVDecoder{Label: "y"}, []byte("id,label,f0\n"), []byte("1,2,3\n"),
			`no label column "y" in the header`},
		{"csv text feature", &CSVDecoder{}, []byte("name,label,f0\n"), []byte("bob,2,3\n"),
			`row 4: column "name" is not a number (leave it out with {ignore-columns})`},
		{"csv wrong field count", &CSVDecoder{Ignore: []string{"id"}}, []byte("id,label,f0\n"), []byte("1,2\n"),
			"row 4: 2 fields, the first row has 3"},
		{"csv fractional label", &CSVDecoder{Ignore: []string{"id"}}, []byte("id,label,f0\n"), []byte("1,2.5,3\n"),
			"row 4: label 2.5 is not a class number"},
		{"jsonl no features", &JSONLDecoder{}, nil, []byte(`{"label":1}` + "\n"),
			`line 4: no key "features"`},
		{"jsonl label not a number", &JSONLDecoder{}, nil, []byte(`{"label":"a","features":[1]}` + "\n"),
			`line 4: key "label" (the label) is not a number`},
		{"libsvm index beyond", &LibSVMDecoder{Dim: 2}, nil, []byte("1 1:0.5 3:1\n"),
			"line 4: index 3 is beyond the 2 features (pass {features} N)"},
		{"libsvm index 0", &LibSVMDecoder{Dim: 2}, nil, []byte("1 0:0.5\n"),
			`line 4: index "0" is not an integer from 1`},
		{"libsvm no dimension", &LibSVMDecoder{}, nil, []byte("1 1:0.5\n"),
			"the number of features must be given ({features} N)"},
		{"npy dtype", &RowDecoder{}, npyHeader("<i8"), make([]byte, 24),
			`dtype "<i8" is not one the validator reads`},
		{"npy label column", &RowDecoder{Label: 5}, npyHeader("<f4"), make([]byte, 12),
			"row 4: label column 5 is not one of the 3 columns"},
		{"wds no label", &WDSDecoder{}, nil, wds("k1.bin", "\x00\x00\x80\x3f"),
			"sample 4: no member .cls (the label)"},
		{"wds no features", &WDSDecoder{}, nil, wds("k1.cls", "1"),
			"sample 4: no member .bin or .pixels (the features)"},
		{"wds ragged floats", &WDSDecoder{}, nil, wds("k1.cls", "1", "k1.bin", "abc"),
			"member k1.bin: 3 bytes is not a whole number of float32 values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.dec.Begin(tt.prologue)
			if err == nil {
				_, _, err = tt.dec.Decode(tt.record, 4, nil)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestTextAndRowDecodersDoNotAllocatePerRecord: csv, libsvm, npy and wds
// decoding reuses its buffers (jsonl uses encoding/json, which does not).
func TestTextAndRowDecodersDoNotAllocatePerRecord(t *testing.T) {
	row := make([]byte, 0, 40)
	for i := range 10 {
		row = binary.LittleEndian.AppendUint32(row, math.Float32bits(float32(i)))
	}
	tests := []struct {
		name     string
		dec      Decoder
		prologue []byte
		record   []byte
	}{
		{"csv", &CSVDecoder{Ignore: []string{"id"}}, []byte("id,label,f0,f1,f2\n"), []byte("12,3,0.25,-1.5e-3,7\n")},
		{"libsvm", &LibSVMDecoder{Dim: 4}, nil, []byte("1 qid:4 1:0.5 3:-2.25 4:1e-3\n")},
		{"npy", &RowDecoder{Label: 0, Ignore: []int{1}}, formats.NPY{}.AppendPrologue(nil, formats.Head{Key: []byte("<f4 (*, 10)")}, 1), row},
	}
	for _, tt := range tests {
		if err := tt.dec.Begin(tt.prologue); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 0, 16)
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			if _, x, err = tt.dec.Decode(tt.record, 0, x[:0]); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per record, want 0", tt.name, allocs)
		}
	}
}

// TestFixedRecordsReadAsFloat32Rows reads the rows of .npy files as
// fixed-size records after a header of the .npy header's length: the same
// records as the .npy decoder gives.
func TestFixedRecordsReadAsFloat32Rows(t *testing.T) {
	s := datagen.Synthetic{Records: 200, Features: 6, Classes: 3, Files: 1, Seed: 2}
	files := writeFormat(t, s, datagen.FormatNPY)
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	hlen := 10 + int64(binary.LittleEndian.Uint16(b[8:10]))
	want, err := LoadTestSet(&RowDecoder{Label: 0, Ignore: []int{1}}, files...)
	if err != nil {
		t.Fatal(err)
	}
	fixed := formats.Fixed{RecordSize: 4 * (6 + 2), HeaderBytes: hlen}
	got, err := LoadTestSet(&RowDecoder{Fixed: &fixed, Label: 0, Ignore: []int{1}}, files...)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != 200 || got.Dim != 6 || !slices.Equal(got.X, want.X) || !slices.Equal(got.Labels, want.Labels) {
		t.Errorf("fixed: %d records of %d features, not the .npy decoder's %d of %d", got.Len(), got.Dim, want.Len(), want.Dim)
	}
}

// TestSequenceTrainsLikeTheConcatenatedFiles: an epoch over a Sequence of
// TFRecord files, whose mini-batches run across file ends, updates the
// model exactly as one stream of the files' bytes does.
func TestSequenceTrainsLikeTheConcatenatedFiles(t *testing.T) {
	files := writeFormat(t, datagen.Synthetic{Records: 1000, Features: 4, Classes: 3, Files: 3, Seed: 8}, datagen.FormatTFRecord)
	var all []byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	weights := func(r io.Reader) []float64 {
		m, err := NewModel(Softmax, 4, 3)
		if err != nil {
			t.Fatal(err)
		}
		tr := &Trainer{Model: m, Decoder: formatDecoder(datagen.FormatTFRecord, 4), LR: 0.05, Batch: 48}
		st, err := tr.TrainEpoch(context.Background(), 0, r)
		if err != nil || st.Records != 1000 {
			t.Fatalf("%d records, %v", st.Records, err)
		}
		return append(m.W, m.B...)
	}
	if a, b := weights(&Sequence{Paths: files}), weights(bytes.NewReader(all)); !slices.Equal(a, b) {
		t.Errorf("a Sequence gives weights %v, the concatenated stream %v", a, b)
	}
}
