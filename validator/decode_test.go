package validator

import (
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/tfexample"
)

// example encodes an Example built by fill.
func example(fill func(b *tfexample.Builder)) []byte {
	var b tfexample.Builder
	fill(&b)
	return b.AppendTo(nil)
}

func TestDecodeReadsFloatFeaturesAndLabel(t *testing.T) {
	p := example(func(b *tfexample.Builder) {
		b.Int64("id", 9)
		b.Float("x", 1.5, -2, 0.25)
		b.Int64("y", 3)
	})
	prefix := []float32{7}
	label, x, err := ExampleDecoder{Label: "y", Features: "x"}.DecodeExample(p, 0, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if label != 3 || !slices.Equal(x, []float32{7, 1.5, -2, 0.25}) {
		t.Errorf("got label %d, x %v; want 3, [7 1.5 -2 0.25] (appended)", label, x)
	}
}

func TestDecodeScalesBytePixelsToUnitRange(t *testing.T) {
	p := example(func(b *tfexample.Builder) {
		b.Int64("label", 1)
		b.Bytes("image", []byte{0, 51, 102, 255})
	})
	label, x, err := ExampleDecoder{Label: "label", Features: "image"}.DecodeExample(p, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if label != 1 || !slices.Equal(x, []float32{0, 0.2, 0.4, 1}) {
		t.Errorf("got label %d, x %v; want 1, [0 0.2 0.4 1]", label, x)
	}
	for _, v := range x {
		if v < 0 || v > 1 {
			t.Errorf("pixel %v is outside [0, 1]", v)
		}
	}
}

func TestDecodeErrorsNameTheRecordAndFeature(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
		want    string
	}{
		{"label missing", example(func(b *tfexample.Builder) { b.Float("x", 1) }),
			`record 17: no feature "y" (the label)`},
		{"features missing", example(func(b *tfexample.Builder) { b.Int64("y", 1) }),
			`record 17: no feature "x" (the features)`},
		{"label is a float_list", example(func(b *tfexample.Builder) { b.Float("y", 1); b.Float("x", 1) }),
			`record 17: feature "y" (the label) holds float_list, want int64_list`},
		{"label has two values", example(func(b *tfexample.Builder) { b.Int64("y", 1, 2); b.Float("x", 1) }),
			`record 17: feature "y" (the label) holds 2 values, want 1`},
		{"label is empty", example(func(b *tfexample.Builder) { b.Int64("y"); b.Float("x", 1) }),
			`record 17: feature "y" (the label) holds 0 values, want 1`},
		{"features are an int64_list", example(func(b *tfexample.Builder) { b.Int64("y", 1); b.Int64("x", 1) }),
			`record 17: feature "x" (the features) holds int64_list, want float_list or bytes_list`},
		{"pixels in two bytes values", example(func(b *tfexample.Builder) { b.Int64("y", 1); b.Bytes("x", []byte{1}, []byte{2}) }),
			`record 17: feature "x" (the features) is a bytes_list of 2 values, want one value of raw uint8 pixels`},
		{"not an Example", []byte{0xff, 0xff},
			`record 17: tfexample: Example field tag at offset 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := []float32{42}
			_, got, err := ExampleDecoder{Label: "y", Features: "x"}.DecodeExample(tt.payload, 17, x)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
			if !slices.Equal(got, x) {
				t.Errorf("x = %v after an error, want it unchanged", got)
			}
		})
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	floats := example(func(b *tfexample.Builder) {
		b.Int64("label", 2)
		b.Float("features", make([]float32, 32)...)
		b.Int64("id", 5)
	})
	pixels := example(func(b *tfexample.Builder) {
		b.Int64("label", 2)
		b.Bytes("image", make([]byte, 784))
	})
	for _, c := range []struct {
		name    string
		d       ExampleDecoder
		payload []byte
	}{{"float_list", ExampleDecoder{"label", "features"}, floats}, {"bytes_list", ExampleDecoder{"label", "image"}, pixels}} {
		x := make([]float32, 0, 784)
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			if _, x, err = c.d.DecodeExample(c.payload, 0, x[:0]); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per record, want 0", c.name, allocs)
		}
	}
}
