package datagen

import (
	"archive/tar"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
)

// Formats a dataset can be written in (the Format field of Synthetic and
// FashionMNIST). Every one holds the same records, in the same order and
// split into the same files; only the encoding differs:
//
//   - tfrecord: tf.train.Example records (see LabelFeature, ValueFeature,
//     ImageFeature, IDFeature).
//   - csv: a header row "id,label,f0,…,fD-1" (Fashion-MNIST: "p0,…,p783",
//     integer pixels 0–255), then one row per record.
//   - jsonl: one object per line, {"id":…,"label":…,"features":[…]}
//     (Fashion-MNIST: "pixels", integers 0–255).
//   - libsvm: "label qid:ID 1:v1 2:v2 …", indexes from 1, zero values left
//     out. The record's id is its qid, the one place LIBSVM has for a
//     number per line that is not a feature: scikit-learn's
//     load_svmlight_file reads such files unmodified (query_id=True
//     returns the ids) and LIBSVM tools ignore it.
//   - wds: a WebDataset tar shard; record id is the sample KEY (the id in
//     decimal, at least 8 digits) with members KEY.cls (the label in
//     decimal), KEY.id (the id in decimal) and KEY.bin (the features,
//     little-endian float32) or, for Fashion-MNIST, KEY.pixels (784 raw
//     uint8 pixels, row by row).
//   - npy: one 2-D array per file, a row per record. Synthetic: float32
//     ('<f4') columns label, id, f0, …, fD-1 (ids are exact up to 2^24).
//     Fashion-MNIST: uint8 ('|u1') columns label, p0, …, p783 (no id: it
//     does not fit in a byte).
const (
	FormatTFRecord = "tfrecord"
	FormatCSV      = "csv"
	FormatJSONL    = "jsonl"
	FormatLibSVM   = "libsvm"
	FormatWDS      = "wds"
	FormatNPY      = "npy"
)

// Formats returns the formats a dataset can be written in.
func Formats() []string {
	return []string{FormatTFRecord, FormatCSV, FormatJSONL, FormatLibSVM, FormatWDS, FormatNPY}
}

// sample is one record of a dataset, in the form every encoder takes.
type sample struct {
	id, label int
	values    []float32 // Synthetic: the features
	pixels    []byte    // FashionMNIST: the image
}

// An encoder writes the records of one file of a format. begin is called
// before the first record (with the number the file will hold), end after
// the last; an encoder reuses its buffers from file to file and does not
// allocate per record once they have grown (wds aside: archive/tar
// allocates per member).
type encoder interface {
	begin(w io.Writer, records int) error
	write(s *sample) error
	end() error
}

// newEncoder returns the encoder of format for records of dim features
// (float values, or uint8 pixels when pixels is set).
func newEncoder(format string, dim int, pixels bool) (encoder, error) {
	switch format {
	case "", FormatTFRecord:
		return &tfrecordEncoder{pixels: pixels}, nil
	case FormatCSV:
		return &textEncoder{line: appendCSV, head: csvHeader(dim, pixels)}, nil
	case FormatJSONL:
		return &textEncoder{line: appendJSONL}, nil
	case FormatLibSVM:
		return &textEncoder{line: appendLibSVM}, nil
	case FormatWDS:
		return &wdsEncoder{}, nil
	case FormatNPY:
		key := fmt.Sprintf("<f4 (*, %d)", dim+2)
		if pixels {
			key = fmt.Sprintf("|u1 (*, %d)", dim+1)
		}
		return &npyEncoder{key: []byte(key)}, nil
	}
	return nil, fmt.Errorf("datagen: unknown format %q (want one of %s)", format, strings.Join(Formats(), ", "))
}

// extension returns the file extension of format, which newEncoder knows.
func extension(format string) string {
	if format == "" {
		format = FormatTFRecord
	}
	f, err := formats.Lookup(format, formats.Options{})
	if err != nil {
		return ".dat"
	}
	return f.Ext()
}

// tfrecordEncoder writes tf.train.Example records framed as TFRecords.
type tfrecordEncoder struct {
	pixels bool
	fw     *formats.Writer
	b      tfexample.Builder
	buf    []byte
}

func (e *tfrecordEncoder) begin(w io.Writer, _ int) error {
	e.fw = formats.NewWriter(w)
	return nil
}

func (e *tfrecordEncoder) write(s *sample) error {
	e.b.Reset()
	e.b.Int64(LabelFeature, int64(s.label))
	if e.pixels {
		e.b.Bytes(ImageFeature, s.pixels)
	} else {
		e.b.Float(ValueFeature, s.values...)
	}
	e.b.Int64(IDFeature, int64(s.id))
	e.buf = e.b.AppendTo(e.buf[:0])
	return e.fw.Write(e.buf)
}

func (e *tfrecordEncoder) end() error { return nil }

// textEncoder writes a line per record, after an optional header line.
type textEncoder struct {
	line func(dst []byte, s *sample) []byte
	head []byte
	w    io.Writer
	buf  []byte
}

func (e *textEncoder) begin(w io.Writer, _ int) error {
	e.w = w
	_, err := w.Write(e.head)
	return err
}

func (e *textEncoder) write(s *sample) error {
	e.buf = e.line(e.buf[:0], s)
	_, err := e.w.Write(e.buf)
	return err
}

func (e *textEncoder) end() error { return nil }

func csvHeader(dim int, pixels bool) []byte {
	name := "f"
	if pixels {
		name = "p"
	}
	b := []byte("id,label")
	for d := range dim {
		b = append(b, ',')
		b = append(b, name...)
		b = strconv.AppendInt(b, int64(d), 10)
	}
	return append(b, '\n')
}

// appendFloat appends v in the shortest form that parses back to the same
// float32, which is also a valid JSON number.
func appendFloat(dst []byte, v float32) []byte {
	return strconv.AppendFloat(dst, float64(v), 'g', -1, 32)
}

func appendCSV(b []byte, s *sample) []byte {
	b = strconv.AppendInt(b, int64(s.id), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(s.label), 10)
	for _, v := range s.values {
		b = appendFloat(append(b, ','), v)
	}
	for _, p := range s.pixels {
		b = strconv.AppendUint(append(b, ','), uint64(p), 10)
	}
	return append(b, '\n')
}

func appendJSONL(b []byte, s *sample) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, int64(s.id), 10)
	b = append(b, `,"label":`...)
	b = strconv.AppendInt(b, int64(s.label), 10)
	if s.pixels != nil {
		b = append(b, `,"pixels":[`...)
		for i, p := range s.pixels {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(p), 10)
		}
	} else {
		b = append(b, `,"features":[`...)
		for i, v := range s.values {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, v)
		}
	}
	return append(b, "]}\n"...)
}

func appendLibSVM(b []byte, s *sample) []byte {
	b = strconv.AppendInt(b, int64(s.label), 10)
	b = append(b, " qid:"...)
	b = strconv.AppendInt(b, int64(s.id), 10)
	for i, v := range s.values {
		if v != 0 {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(i+1), 10)
			b = appendFloat(append(b, ':'), v)
		}
	}
	for i, p := range s.pixels {
		if p != 0 {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(i+1), 10)
			b = strconv.AppendUint(append(b, ':'), uint64(p), 10)
		}
	}
	return append(b, '\n')
}

// wdsEncoder writes WebDataset samples into a tar shard. Headers carry no
// time, owner or mode beyond 0644, so that the same dataset always gives
// the same bytes.
type wdsEncoder struct {
	tw   *tar.Writer
	key  []byte
	data []byte
}

func (e *wdsEncoder) begin(w io.Writer, _ int) error {
	e.tw = tar.NewWriter(w)
	return nil
}

func (e *wdsEncoder) member(ext string, data []byte) error {
	h := tar.Header{
		Typeflag: tar.TypeReg,
		Name:     string(e.key) + ext,
		Size:     int64(len(data)),
		Mode:     0o644,
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatUSTAR,
	}
	if err := e.tw.WriteHeader(&h); err != nil {
		return err
	}
	_, err := e.tw.Write(data)
	return err
}

func (e *wdsEncoder) write(s *sample) error {
	e.key = fmt.Appendf(e.key[:0], "%08d", s.id)
	e.data = strconv.AppendInt(e.data[:0], int64(s.label), 10)
	if err := e.member(".cls", e.data); err != nil {
		return err
	}
	e.data = strconv.AppendInt(e.data[:0], int64(s.id), 10)
	if err := e.member(".id", e.data); err != nil {
		return err
	}
	if s.pixels != nil {
		return e.member(".pixels", s.pixels)
	}
	e.data = e.data[:0]
	for _, v := range s.values {
		e.data = binary.LittleEndian.AppendUint32(e.data, math.Float32bits(v))
	}
	return e.member(".bin", e.data)
}

// end writes the end-of-archive marker.
func (e *wdsEncoder) end() error { return e.tw.Close() }

// npyEncoder writes a .npy array of a row per record; its header, which
// holds the row count, is the one a served .npy part has.
type npyEncoder struct {
	key []byte // formats.NPY's Head.Key: dtype and row shape
	w   io.Writer
	buf []byte
}

func (e *npyEncoder) begin(w io.Writer, records int) error {
	e.w = w
	e.buf = formats.NPY{}.AppendPrologue(e.buf[:0], formats.Head{Key: e.key}, int64(records))
	_, err := w.Write(e.buf)
	return err
}

func (e *npyEncoder) write(s *sample) error {
	if s.pixels != nil {
		e.buf = append(append(e.buf[:0], byte(s.label)), s.pixels...)
	} else {
		e.buf = binary.LittleEndian.AppendUint32(e.buf[:0], math.Float32bits(float32(s.label)))
		e.buf = binary.LittleEndian.AppendUint32(e.buf, math.Float32bits(float32(s.id)))
		for _, v := range s.values {
			e.buf = binary.LittleEndian.AppendUint32(e.buf, math.Float32bits(v))
		}
	}
	_, err := e.w.Write(e.buf)
	return err
}

func (e *npyEncoder) end() error { return nil }

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// validFormat reports an error for a format newEncoder does not know.
func validFormat(format string) error {
	if format != "" && !slices.Contains(Formats(), format) {
		return fmt.Errorf("datagen: unknown format %q (want one of %s)", format, strings.Join(Formats(), ", "))
	}
	return nil
}
