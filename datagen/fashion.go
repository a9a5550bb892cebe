package datagen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/gzip"
)

// DefaultFashionDir is where Debian's dataset-fashion-mnist package installs
// the Fashion-MNIST idx files.
const DefaultFashionDir = "/usr/share/datasets/fashion-mnist"

// ImageFeature is the feature of a converted Fashion-MNIST record that holds
// its pixels: a bytes_list of one value of rows·cols uint8 pixels (784 for
// 28×28), row by row, 0 being background.
const ImageFeature = "image"

// Magic numbers of the idx files: two zero bytes, the element type (0x08,
// unsigned byte) and the number of dimensions.
const (
	idxImagesMagic = 0x00000803 // uint8, 3 dimensions: count, rows, cols
	idxLabelsMagic = 0x00000801 // uint8, 1 dimension: count
)

// Streams of the Fashion-MNIST record orders, the second PCG seed word.
const (
	streamFashionTrain = 3
	streamFashionTest  = 4
)

// A fashionSplit names the idx files of one split of Fashion-MNIST.
type fashionSplit struct {
	name           string // output subdirectory
	images, labels string // idx file names in From
	stream         uint64 // PCG stream of the shuffled order
}

// fashionSplits returns the splits of Fashion-MNIST, train first, with the
// file names of the original distribution (and of the Debian package).
func fashionSplits() [2]fashionSplit {
	return [2]fashionSplit{
		{"train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", streamFashionTrain},
		{"test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", streamFashionTest},
	}
}

// FashionMNIST converts the Fashion-MNIST dataset (Xiao et al., 2017: 60000
// training and 10000 test images of 28×28 grey pixels in 10 classes of
// clothing) from its gzip'd idx files into TFRecord files of
// tf.train.Example records, with the features ImageFeature (the pixels),
// LabelFeature (int64_list, the class in [0, 10)) and IDFeature (int64_list,
// the index of the image in its idx file).
//
// When Clustered, the records of each split are stably sorted by label, so
// ids increase within a class. Otherwise they are written in a uniformly
// random permutation drawn from Seed (a different one for each split). Each
// split is cut into Files contiguous runs, one per file, whose sizes differ
// by at most one.
type FashionMNIST struct {
	From      string // directory of the idx files; "" means DefaultFashionDir
	Clustered bool   // true: sorted by label; false: shuffled
	Files     int    // output files per split
	Seed      uint64 // seed of the shuffled order
	// Format is one of Formats; "" means tfrecord. wds writes each image
	// as KEY.pixels (784 raw uint8) with KEY.cls and KEY.id; see Formats.
	Format string
}

// dir returns the directory the idx files are read from.
func (f FashionMNIST) dir() string {
	if f.From == "" {
		return DefaultFashionDir
	}
	return f.From
}

// FileName returns the base name of file i of a split,
// data-0000i-of-0000F.tfrecord (or the extension of the Format).
func (f FashionMNIST) FileName(i int) string {
	return fmt.Sprintf("data-%05d-of-%05d%s", i, f.Files, extension(f.Format))
}

// Write converts the dataset into outDir/train and outDir/test, creating
// them if needed, as the files named by FileName. The idx files are checked
// before anything is written. Every file is written under a hidden
// temporary name and all, of both splits, are renamed into place once every
// one is complete; on error the temporary files are removed. progress, if
// not nil, is called now and then with the number of bytes written so far.
func (f FashionMNIST) Write(ctx context.Context, outDir string, progress func(bytesWritten int64)) (train, test Summary, err error) {
	if f.Files < 1 {
		return Summary{}, Summary{}, fmt.Errorf("datagen: Files must be at least 1, got %d", f.Files)
	}
	if err := validFormat(f.Format); err != nil {
		return Summary{}, Summary{}, err
	}
	if err := f.checkPresent(); err != nil {
		return Summary{}, Summary{}, err
	}
	splits := fashionSplits()
	var sets [len(splits)]*idxImages
	for i, sp := range splits {
		sets[i], err = readIDXPair(filepath.Join(f.dir(), sp.images), filepath.Join(f.dir(), sp.labels))
		if err != nil {
			return Summary{}, Summary{}, err
		}
		if n := len(sets[i].labels); f.Files > n {
			return Summary{}, Summary{}, fmt.Errorf("datagen: Files (%d) must not exceed the %d records of the %s split", f.Files, n, sp.name)
		}
	}

	fw := newFileWriter(progress)
	defer fw.abort()
	var s sample
	for i, sp := range splits {
		set := sets[i]
		enc, err := newEncoder(f.Format, set.rows*set.cols, true)
		if err != nil {
			return Summary{}, Summary{}, err
		}
		dir := filepath.Join(outDir, sp.name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return Summary{}, Summary{}, fmt.Errorf("datagen: %w", err)
		}
		var order []uint32
		if f.Clustered {
			order = sortedByLabel(set.labels)
		} else {
			order = permutation(f.Seed, sp.stream, len(set.labels))
		}
		next := 0
		for j := range f.Files {
			n := len(order) / f.Files
			if j < len(order)%f.Files {
				n++
			}
			from := next
			err := fw.writeFile(ctx, filepath.Join(dir, f.FileName(j)), n, enc, func(k int) *sample {
				id := int(order[from+k])
				s = sample{id: id, label: int(set.labels[id]), pixels: set.image(id)}
				return &s
			})
			if err != nil {
				return Summary{}, Summary{}, fmt.Errorf("datagen: writing %s/%s: %w", sp.name, f.FileName(j), err)
			}
			next += n
		}
	}
	if err := fw.commit(); err != nil {
		return Summary{}, Summary{}, fmt.Errorf("datagen: %w", err)
	}
	return fw.summary(0, f.Files), fw.summary(f.Files, 2*f.Files), nil
}

// checkPresent returns an error that says how to get the dataset if one of
// its files is missing.
func (f FashionMNIST) checkPresent() error {
	for _, sp := range fashionSplits() {
		for _, name := range []string{sp.images, sp.labels} {
			path := filepath.Join(f.dir(), name)
			_, err := os.Stat(path)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("datagen: Fashion-MNIST not found: looked for %s: %w; "+
					"install it with `apt-get install dataset-fashion-mnist` (Debian), "+
					"or pass --from DIR naming a directory with the four gzip'd idx files", path, fs.ErrNotExist)
			}
			if err != nil {
				return fmt.Errorf("datagen: %w", err)
			}
		}
	}
	return nil
}

// sortedByLabel returns the indexes of labels in stably sorted order of
// their labels, by a counting sort.
func sortedByLabel(labels []uint8) []uint32 {
	var start [256]int
	for _, l := range labels {
		start[l]++
	}
	sum := 0
	for l, n := range start {
		start[l] = sum
		sum += n
	}
	order := make([]uint32, len(labels))
	for i, l := range labels {
		order[start[l]] = uint32(i)
		start[l]++
	}
	return order
}

// idxImages is one split of an image dataset read from a pair of idx files.
type idxImages struct {
	rows, cols int
	pixels     []byte  // len(labels) images of rows·cols bytes
	labels     []uint8 // the class of each image
}

// image returns the pixels of image i.
func (s *idxImages) image(i int) []byte {
	size := s.rows * s.cols
	return s.pixels[i*size : (i+1)*size]
}

// readIDXPair reads a gzip'd idx file of images and the matching gzip'd idx
// file of labels.
func readIDXPair(imagesPath, labelsPath string) (*idxImages, error) {
	imgDims, pixels, err := readIDXFile(imagesPath, idxImagesMagic)
	if err != nil {
		return nil, err
	}
	lblDims, labels, err := readIDXFile(labelsPath, idxLabelsMagic)
	if err != nil {
		return nil, err
	}
	if imgDims[0] != lblDims[0] {
		return nil, fmt.Errorf("datagen: %s holds %d images but %s holds %d labels", imagesPath, imgDims[0], labelsPath, lblDims[0])
	}
	return &idxImages{rows: imgDims[1], cols: imgDims[2], pixels: pixels, labels: labels}, nil
}

// readIDXFile reads a gzip'd idx file, checking that it has the given magic
// number, and returns its dimensions and data.
func readIDXFile(path string, magic uint32) (dims []int, data []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("datagen: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("datagen: %s: not a gzip stream: %w", path, err)
	}
	defer zr.Close()
	dims, data, err = parseIDX(zr, magic)
	if err != nil {
		return nil, nil, fmt.Errorf("datagen: %s: %w", path, err)
	}
	return dims, data, nil
}

// maxIDXBytes bounds the data size an idx header may announce.
const maxIDXBytes = 1 << 34

// parseIDX reads an idx stream of unsigned bytes (the format of the MNIST
// files: a big-endian uint32 magic number 0x000008DD, where DD is the
// number of dimensions, then DD big-endian uint32 sizes, then the data)
// that must have the given magic number, and returns its dimensions and
// data. The data must be exactly as long as the dimensions say.
func parseIDX(r io.Reader, magic uint32) (dims []int, data []byte, err error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, nil, fmt.Errorf("reading idx magic number: %w", noEOF(err))
	}
	if got := binary.BigEndian.Uint32(head[:]); got != magic {
		return nil, nil, fmt.Errorf("idx magic number is 0x%08x, want 0x%08x (%s)", got, magic, describeMagic(magic))
	}
	dims = make([]int, magic&0xff)
	size := uint64(1)
	for i := range dims {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return nil, nil, fmt.Errorf("reading idx dimension %d of %d: %w", i+1, len(dims), noEOF(err))
		}
		d := binary.BigEndian.Uint32(head[:])
		dims[i] = int(d)
		if d != 0 && size > math.MaxUint64/uint64(d) {
			size = math.MaxUint64
		} else {
			size *= uint64(d)
		}
	}
	if size > maxIDXBytes {
		return nil, nil, fmt.Errorf("idx dimensions %v give %d bytes of data, more than the %d accepted", dims, size, uint64(maxIDXBytes))
	}
	data, err = io.ReadAll(io.LimitReader(r, int64(size)+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading idx data: %w", err)
	}
	switch {
	case uint64(len(data)) < size:
		return nil, nil, fmt.Errorf("idx data is truncated: dimensions %v give %d bytes, the file holds %d", dims, size, len(data))
	case uint64(len(data)) > size:
		return nil, nil, fmt.Errorf("idx data is longer than its dimensions %v say (%d bytes)", dims, size)
	}
	return dims, data, nil
}

// describeMagic says what an idx magic number stands for.
func describeMagic(magic uint32) string {
	switch magic {
	case idxImagesMagic:
		return "an idx file of uint8 images"
	case idxLabelsMagic:
		return "an idx file of uint8 labels"
	}
	return "an idx file"
}

// noEOF turns io.EOF into io.ErrUnexpectedEOF: a header cut short is
// truncated, not empty.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
