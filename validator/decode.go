// Package validator trains small linear models (logistic regression, linear
// SVM, softmax regression) by SGD on TFRecord streams of tf.train.Example
// records, such as the part files of a corgifs mount, and measures their
// test accuracy after every epoch. Comparing runs over a CorgiPile order, a
// full shuffle and a clustered (sorted by label) order shows whether
// training on corgifs converges like training on a full shuffle.
package validator

import (
	"fmt"

	"github.com/corgifs/corgifs/tfexample"
)

// A Decoder reads the label and the feature vector of tf.train.Example
// records.
//
// The label feature must be an int64_list of one value. The features
// feature is either a float_list, taken as is, or a bytes_list of one value
// of D raw uint8 pixels, each scaled to [0, 1] by dividing by 255.
type Decoder struct {
	Label    string // name of the label feature
	Features string // name of the features feature
}

// Decode decodes the Example payload, the record numbered record of its
// stream (used in errors only), and returns its label and x with the
// features appended. It does not allocate once x has the capacity for the
// features. On error, x is returned unchanged.
func (d Decoder) Decode(payload []byte, record int64, x []float32) (label int, features []float32, err error) {
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
		features = x
		for _, p := range bv[0] {
			features = append(features, float32(p)/255)
		}
	default:
		return 0, x, fmt.Errorf("record %d: feature %q (the features) holds %v, want float_list or bytes_list", record, d.Features, ff.Kind())
	}
	return int(lv[0]), features, nil
}
