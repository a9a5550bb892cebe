package datagen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/corgifs/corgifs/internal/testenv"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/corgifs/corgifs/formats"
)

// idxBytes returns an idx file with the given magic number, dimensions and
// data, uncompressed.
func idxBytes(magic uint32, dims []uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magic)
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

func writeGzip(t *testing.T, path string, b []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o666); err != nil {
		t.Fatal(err)
	}
}

// tinySplit is a hand-made split: images of 2×3 pixels.
type tinySplit struct {
	labels []uint8
	pixels []byte
}

func makeTinySplit(labels []uint8) tinySplit {
	s := tinySplit{labels: labels}
	for i := range labels {
		for p := range 6 {
			s.pixels = append(s.pixels, byte(i*10+p)) // unique per image
		}
	}
	return s
}

func (s tinySplit) image(i int) []byte { return s.pixels[i*6 : (i+1)*6] }

// writeTinyFashion writes a train and a test split as gzip'd idx files
// named as in Fashion-MNIST into a new directory, and returns it.
func writeTinyFashion(t *testing.T, train, test tinySplit) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []struct {
		prefix string
		s      tinySplit
	}{{"train", train}, {"t10k", test}} {
		n := uint32(len(f.s.labels))
		writeGzip(t, filepath.Join(dir, f.prefix+"-images-idx3-ubyte.gz"), idxBytes(0x803, []uint32{n, 2, 3}, f.s.pixels))
		writeGzip(t, filepath.Join(dir, f.prefix+"-labels-idx1-ubyte.gz"), idxBytes(0x801, []uint32{n}, f.s.labels))
	}
	return dir
}

// fashionRec is a decoded converted record.
type fashionRec = rec

// readFashion reads back every record of sum, in order, checking every CRC.
func readFashion(t *testing.T, sum Summary) []fashionRec {
	t.Helper()
	var recs []fashionRec
	for _, path := range sum.Files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		starts, err := formats.Split(b, 0, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, s := range starts {
			recs = append(recs, decodeFashion(t, formats.Payload(b[s:])))
		}
	}
	if len(recs) != sum.Records {
		t.Fatalf("read %d records, summary says %d", len(recs), sum.Records)
	}
	return recs
}

func decodeFashion(t *testing.T, payload []byte) fashionRec {
	t.Helper()
	r := decode(t, payload)
	if r.image == nil {
		t.Fatalf("record %d has no %q", r.id, ImageFeature)
	}
	return r
}

func TestParseIDXRejectsBadHeaders(t *testing.T) {
	good := idxBytes(0x803, []uint32{2, 2, 3}, make([]byte, 12))
	tests := []struct {
		name  string
		input []byte
		magic uint32
		want  string // "" for success
	}{
		{"valid images", good, 0x803, ""},
		{"valid labels", idxBytes(0x801, []uint32{3}, []byte{1, 2, 3}), 0x801, ""},
		{"valid empty", idxBytes(0x801, []uint32{0}, nil), 0x801, ""},
		{"empty file", nil, 0x803, "reading idx magic number: unexpected EOF"},
		{"short magic", []byte{0, 0, 8}, 0x803, "reading idx magic number: unexpected EOF"},
		{"labels where images are wanted", idxBytes(0x801, []uint32{3}, []byte{1, 2, 3}), 0x803, "magic number is 0x00000801, want 0x00000803 (an idx file of uint8 images)"},
		{"images where labels are wanted", good, 0x801, "want 0x00000801 (an idx file of uint8 labels)"},
		{"float element type", idxBytes(0x0d03, []uint32{1, 1, 1}, make([]byte, 4)), 0x803, "magic number is 0x00000d03"},
		{"little-endian magic", []byte{3, 8, 0, 0}, 0x803, "magic number is 0x03080000"},
		{"missing dimension", idxBytes(0x803, []uint32{2, 2}, nil), 0x803, "reading idx dimension 3 of 3: unexpected EOF"},
		{"truncated dimension", good[:13], 0x803, "reading idx dimension 3 of 3: unexpected EOF"},
		{"truncated data", good[:len(good)-1], 0x803, "idx data is truncated: dimensions [2 2 3] give 12 bytes, the file holds 11"},
		{"trailing data", append(slices.Clone(good), 0), 0x803, "idx data is longer than its dimensions [2 2 3] say (12 bytes)"},
		{"huge dimensions", idxBytes(0x803, []uint32{1 << 31, 1 << 31, 1 << 31}, nil), 0x803, "more than the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dims, data, err := parseIDX(bytes.NewReader(tt.input), tt.magic)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				if len(dims) != int(tt.magic&0xff) || !bytes.HasSuffix(tt.input, data) {
					t.Errorf("dims %v, data %v do not match the input", dims, data)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestFashionConvertsTinyIdxPair(t *testing.T) {
	train := makeTinySplit([]uint8{2, 0, 1, 0, 2, 9, 0})
	test := makeTinySplit([]uint8{1, 1, 0})
	from := writeTinyFashion(t, train, test)
	for _, clustered := range []bool{true, false} {
		t.Run(fmt.Sprintf("clustered=%v", clustered), func(t *testing.T) {
			out := t.TempDir()
			trainSum, testSum, err := FashionMNIST{From: from, Clustered: clustered, Files: 2, Seed: 3}.Write(context.Background(), out, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name string
				sum  Summary
				s    tinySplit
			}{{"train", trainSum, train}, {"test", testSum, test}} {
				want := []string{filepath.Join(out, c.name, "data-00000-of-00002.tfrecord"), filepath.Join(out, c.name, "data-00001-of-00002.tfrecord")}
				if !slices.Equal(c.sum.Files, want) {
					t.Errorf("%s files %v, want %v", c.name, c.sum.Files, want)
				}
				recs := readFashion(t, c.sum)
				var ids []int
				for _, r := range recs {
					ids = append(ids, r.id)
					if r.label != int(c.s.labels[r.id]) || !bytes.Equal(r.image, c.s.image(r.id)) {
						t.Errorf("%s record %+v does not match image %d of the idx files", c.name, r, r.id)
					}
				}
				sorted := slices.Sorted(slices.Values(ids))
				if !slices.Equal(sorted, []int{0, 1, 2, 3, 4, 5, 6}[:len(c.s.labels)]) {
					t.Errorf("%s ids %v are not a permutation of the images", c.name, ids)
				}
				if clustered {
					// A stable sort by label keeps ids increasing within a class.
					if !slices.IsSortedFunc(recs, func(a, b fashionRec) int {
						if a.label != b.label {
							return a.label - b.label
						}
						return a.id - b.id
					}) {
						t.Errorf("%s clustered order %v is not stably sorted by label", c.name, recs)
					}
				}
			}
			if trainSum.Records != 7 || testSum.Records != 3 {
				t.Errorf("records %d train, %d test; want 7, 3", trainSum.Records, testSum.Records)
			}
		})
	}
}

func TestFashionShuffledOrderIsSeeded(t *testing.T) {
	labels := make([]uint8, 200)
	for i := range labels {
		labels[i] = uint8(i / 20) // sorted in the idx file
	}
	from := writeTinyFashion(t, makeTinySplit(labels), makeTinySplit([]uint8{0, 1}))
	order := func(seed uint64) []int {
		train, _, err := FashionMNIST{From: from, Files: 1, Seed: seed}.Write(context.Background(), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		for _, r := range readFashion(t, train) {
			ids = append(ids, r.id)
		}
		return ids
	}
	first := order(1)
	if !slices.Equal(first, order(1)) {
		t.Error("the same seed gives two orders")
	}
	if slices.Equal(first, order(2)) {
		t.Error("two seeds give the same order")
	}
	if slices.IsSorted(first) {
		t.Error("shuffled order is the idx order")
	}
}

func TestFashionMissingFilesSayHowToInstall(t *testing.T) {
	from := filepath.Join(t.TempDir(), "nowhere")
	out := filepath.Join(t.TempDir(), "out")
	_, _, err := FashionMNIST{From: from, Files: 1}.Write(context.Background(), out, nil)
	for _, want := range []string{filepath.Join(from, "train-images-idx3-ubyte.gz"), "apt-get install dataset-fashion-mnist", "--from DIR"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one containing %q", err, want)
		}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want one matching fs.ErrNotExist", err)
	}
	if _, serr := os.Stat(out); !errors.Is(serr, fs.ErrNotExist) {
		t.Error("a failed conversion created the output directory")
	}
}

func TestFashionDefaultsToTheDebianDirectory(t *testing.T) {
	if got := (FashionMNIST{}).dir(); got != "/usr/share/datasets/fashion-mnist" {
		t.Errorf("default From is %q", got)
	}
}

func TestFashionRejectsBadInput(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		files int
		want  string
	}{
		{"no files", func(*testing.T, string) {}, 0, "Files must be at least 1"},
		{"more files than test records", func(*testing.T, string) {}, 4, "Files (4) must not exceed the 3 records of the test split"},
		{"label count differs", func(t *testing.T, dir string) {
			writeGzip(t, filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"), idxBytes(0x801, []uint32{2}, []byte{0, 1}))
		}, 1, "t10k-images-idx3-ubyte.gz holds 3 images but " + "%s/t10k-labels-idx1-ubyte.gz holds 2 labels"},
		{"files swapped", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "train-labels-idx1-ubyte.gz"), filepath.Join(dir, "tmp"))
			os.Rename(filepath.Join(dir, "train-images-idx3-ubyte.gz"), filepath.Join(dir, "train-labels-idx1-ubyte.gz"))
			os.Rename(filepath.Join(dir, "tmp"), filepath.Join(dir, "train-images-idx3-ubyte.gz"))
		}, 1, "train-images-idx3-ubyte.gz: idx magic number is 0x00000801, want 0x00000803"},
		{"not gzip'd", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte.gz"), idxBytes(0x801, []uint32{4}, []byte{0, 1, 2, 3}), 0o666)
		}, 1, "train-labels-idx1-ubyte.gz: not a gzip stream: gzip: invalid header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTinyFashion(t, makeTinySplit([]uint8{0, 1, 2, 3}), makeTinySplit([]uint8{0, 1, 2}))
			tt.setup(t, dir)
			out := filepath.Join(t.TempDir(), "out")
			_, _, err := FashionMNIST{From: dir, Files: tt.files}.Write(context.Background(), out, nil)
			want := tt.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, dir)
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want one containing %q", err, want)
			}
			if _, serr := os.Stat(out); !errors.Is(serr, fs.ErrNotExist) {
				t.Error("a failed conversion created the output directory")
			}
		})
	}
}

func TestFashionCancelLeavesNoFiles(t *testing.T) {
	from := writeTinyFashion(t, makeTinySplit(make([]uint8, 10000)), makeTinySplit([]uint8{0}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := t.TempDir()
	_, _, err := FashionMNIST{From: from, Files: 1}.Write(ctx, out, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	for _, split := range []string{"train", "test"} {
		if entries, _ := os.ReadDir(filepath.Join(out, split)); len(entries) != 0 {
			t.Errorf("canceled conversion left %d files in %s", len(entries), split)
		}
	}
}

func TestFashionRealData(t *testing.T) {
	if _, err := os.Stat(DefaultFashionDir); err != nil {
		testenv.Missing(t, "Fashion-MNIST is not installed (%v); apt-get install dataset-fashion-mnist", err)
	}
	var progress []int64
	train, test, err := FashionMNIST{Clustered: true, Files: 3}.Write(context.Background(), t.TempDir(), func(n int64) { progress = append(progress, n) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(progress) || progress[len(progress)-1] != train.Bytes+test.Bytes {
		t.Errorf("progress does not grow to the %d bytes written", train.Bytes+test.Bytes)
	}
	for _, c := range []struct {
		name string
		sum  Summary
		n    int
	}{{"train", train, 60000}, {"test", test, 10000}} {
		if c.sum.Records != c.n || len(c.sum.Files) != 3 {
			t.Fatalf("%s: %d records in %d files, want %d in 3", c.name, c.sum.Records, len(c.sum.Files), c.n)
		}
		recs := readFashion(t, c.sum)
		counts := make([]int, 10)
		seen := make([]bool, c.n)
		for i, r := range recs {
			if len(r.image) != 784 || r.label > 9 || r.id >= c.n || seen[r.id] {
				t.Fatalf("%s record %d: label %d, id %d, %d pixels", c.name, i, r.label, r.id, len(r.image))
			}
			if i > 0 && r.label < recs[i-1].label {
				t.Fatalf("%s record %d: clustered labels decrease", c.name, i)
			}
			seen[r.id] = true
			counts[r.label]++
		}
		for l, n := range counts {
			if n != c.n/10 {
				t.Errorf("%s: class %d has %d records, want %d", c.name, l, n, c.n/10)
			}
		}
	}
}
