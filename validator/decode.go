// Package validator trains small linear models (logistic regression, linear
// SVM, softmax regression) by SGD on streams of records, such as the part
// files of a corgifs mount, and measures their test accuracy after every
// epoch. Comparing runs over a CorgiPile order, a full shuffle and a
// clustered (sorted by label) order shows whether training on corgifs
// converges like training on a full shuffle.
//
// Records are read by the streaming reader of their format (package
// formats) and turned into a label and a feature vector by a Decoder, one
// per format: ExampleDecoder (TFRecord), CSVDecoder, JSONLDecoder,
// LibSVMDecoder, RowDecoder (npy, fixed) and WDSDecoder.
package validator

import (
	"fmt"
	"math"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
)

// A Decoder turns the records of one format into labels and feature
// vectors. Uint8 features (TFRecord bytes, wds .pixels, npy '|u1') are
// scaled to [0, 1] by dividing by 255; numbers in text are taken as they
// are.
type Decoder interface {
	// Format is the format of the streams the Decoder reads.
	Format() formats.Format
	// Begin is called at the start of every stream (a file or a served
	// part) that has records, with its prologue: the CSV header row, the
	// .npy header, fixed-size records' header bytes; nil for the others.
	Begin(prologue []byte) error
	// Decode decodes record, as the format's RecordReader returns it, the
	// record numbered n of its stream (used in errors only), and returns
	// its label and x with the features appended. It should not allocate
	// once x has the capacity for the features. On error, x is returned
	// unchanged.
	Decode(record []byte, n int64, x []float32) (label int, features []float32, err error)
}

// An ExampleDecoder reads the label and the feature vector of
// tf.train.Example records in TFRecord streams.
//
// The label feature must be an int64_list of one value. The features
// feature is either a float_list, taken as is, or a bytes_list of one value
// of D raw uint8 pixels, each scaled to [0, 1] by dividing by 255.
type ExampleDecoder struct {
	Label    string // name of the label feature
	Features string // name of the features feature
}

func (ExampleDecoder) Format() formats.Format { return formats.TFRecord{} }

func (d ExampleDecoder) Begin([]byte) error {
	if d.Label == "" || d.Features == "" {
		return fmt.Errorf("the decoder needs the names of the label and features features, got %+v", d)
	}
	return nil
}

// Decode decodes the Example in the TFRecord frame.
func (d ExampleDecoder) Decode(frame []byte, record int64, x []float32) (label int, features []float32, err error) {
	return d.DecodeExample(formats.Payload(frame), record, x)
}

// DecodeExample decodes an Example payload, without its frame.
func (d ExampleDecoder) DecodeExample(payload []byte, record int64, x []float32) (label int, features []float32, err error) {
	var lf, ff tfexample.Feature
	var haveLabel, haveFeatures bool
	// One walk over the Example finds both features; as in Lookup, the last
	// occurrence of a repeated name wins.
	err = tfexample.Features(payload, func(name []byte, f tfexample.Feature) error {
		switch string(name) {
		case d.Label:
			lf, haveLabel = f, true
		case d.Features:
			ff, haveFeatures = f, true
		}
		return nil
	})
	if err != nil {
		return 0, x, fmt.Errorf("record %d: %w", record, err)
	}
	if !haveLabel {
		return 0, x, fmt.Errorf("record %d: no feature %q (the label)", record, d.Label)
	}
	if !haveFeatures {
		return 0, x, fmt.Errorf("record %d: no feature %q (the features)", record, d.Features)
	}

	if lf.Kind() != tfexample.KindInt64 {
		return 0, x, fmt.Errorf("record %d: feature %q (the label) holds %v, want int64_list", record, d.Label, lf.Kind())
	}
	var lbuf [1]int64
	lv, err := lf.AppendInt64s(lbuf[:0])
	if err != nil {
		return 0, x, fmt.Errorf("record %d: feature %q (the label): %w", record, d.Label, err)
	}
	if len(lv) != 1 {
		return 0, x, fmt.Errorf("record %d: feature %q (the label) holds %d values, want 1", record, d.Label, len(lv))
	}

	switch ff.Kind() {
	case tfexample.KindFloat:
		features, err = ff.AppendFloats(x)
		if err != nil {
			return 0, x, fmt.Errorf("record %d: feature %q (the features): %w", record, d.Features, err)
		}
	case tfexample.KindBytes:
		var bbuf [1][]byte
		bv, err := ff.AppendBytes(bbuf[:0])
		if err != nil {
			return 0, x, fmt.Errorf("record %d: feature %q (the features): %w", record, d.Features, err)
		}
		if len(bv) != 1 {
			return 0, x, fmt.Errorf("record %d: feature %q (the features) is a bytes_list of %d values, want one value of raw uint8 pixels", record, d.Features, len(bv))
		}
		features = appendPixels(x, bv[0])
	default:
		return 0, x, fmt.Errorf("record %d: feature %q (the features) holds %v, want float_list or bytes_list", record, d.Features, ff.Kind())
	}
	return int(lv[0]), features, nil
}

// appendPixels appends uint8 pixels scaled to [0, 1].
func appendPixels(x []float32, pixels []byte) []float32 {
	for _, p := range pixels {
		x = append(x, float32(p)/255)
	}
	return x
}

// classOf returns the class a number in a text record stands for: a
// non-negative integer, or -1, which is 0 (binary LIBSVM data labels its
// classes -1 and +1).
func classOf(v float64) (int, error) {
	switch {
	case v == -1:
		return 0, nil
	case v < 0 || v != math.Trunc(v) || v > math.MaxInt32:
		return 0, fmt.Errorf("label %v is not a class number (an integer from 0, or -1 for 0)", v)
	}
	return int(v), nil
}
