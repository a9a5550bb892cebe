package tfexample

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// feat is a decoded feature, for comparisons.
type feat struct {
	Name   string
	Kind   Kind
	Ints   []int64
	Floats []uint32 // float bits, so that NaNs compare
	Bytes  [][]byte
}

// decodeAll decodes every feature of b with Features and the accessors.
func decodeAll(b []byte) ([]feat, error) {
	var out []feat
	err := Features(b, func(name []byte, f Feature) error {
		d := feat{Name: string(name), Kind: f.Kind()}
		var err error
		switch f.Kind() {
		case KindInt64:
			d.Ints, err = f.AppendInt64s([]int64{})
		case KindFloat:
			var fs []float32
			fs, err = f.AppendFloats(nil)
			d.Floats = []uint32{}
			for _, x := range fs {
				d.Floats = append(d.Floats, math.Float32bits(x))
			}
		case KindBytes:
			d.Bytes, err = f.AppendBytes([][]byte{})
		}
		out = append(out, d)
		return err
	})
	return out, err
}

// build encodes feats with a Builder.
func build(feats []feat) []byte {
	var b Builder
	for _, f := range feats {
		switch f.Kind {
		case KindInt64:
			b.Int64(f.Name, f.Ints...)
		case KindFloat:
			fs := make([]float32, len(f.Floats))
			for i, x := range f.Floats {
				fs[i] = math.Float32frombits(x)
			}
			b.Float(f.Name, fs...)
		case KindBytes:
			b.Bytes(f.Name, f.Bytes...)
		}
	}
	return b.AppendTo(nil)
}

func floatBits(v ...float32) []uint32 {
	out := []uint32{}
	for _, x := range v {
		out = append(out, math.Float32bits(x))
	}
	return out
}

func TestBuilderMatchesHandEncodedGolden(t *testing.T) {
	var b Builder
	b.Int64("a", 1, 300, -1)
	b.Float("b", 1.5)
	b.Bytes("c", []byte("hi"), []byte{})
	b.Int64("e")
	want := []byte{
		0x0a, 0x3f, // Example.features, 63 bytes
		// entry "a": int64_list {1, 300, -1}
		0x0a, 0x16, // Features.feature, 22 bytes
		0x0a, 0x01, 'a', // key
		0x12, 0x11, // value: Feature, 17 bytes
		0x1a, 0x0f, // int64_list, 15 bytes
		0x0a, 0x0d, // value, packed, 13 bytes
		0x01,       // 1
		0xac, 0x02, // 300
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // -1
		// entry "b": float_list {1.5}
		0x0a, 0x0d,
		0x0a, 0x01, 'b',
		0x12, 0x08,
		0x12, 0x06, // float_list, 6 bytes
		0x0a, 0x04, // value, packed, 4 bytes
		0x00, 0x00, 0xc0, 0x3f, // 1.5 = 0x3fc00000, little endian
		// entry "c": bytes_list {"hi", ""}
		0x0a, 0x0d,
		0x0a, 0x01, 'c',
		0x12, 0x08,
		0x0a, 0x06, // bytes_list, 6 bytes
		0x0a, 0x02, 'h', 'i',
		0x0a, 0x00,
		// entry "e": empty int64_list
		0x0a, 0x07,
		0x0a, 0x01, 'e',
		0x12, 0x02,
		0x1a, 0x00,
	}
	if got := b.AppendTo(nil); !bytes.Equal(got, want) {
		t.Errorf("encoding:\n got % x\nwant % x", got, want)
	}
}

func TestEmptyBuilderEncodesEmptyFeatures(t *testing.T) {
	var b Builder
	if got, want := b.AppendTo([]byte{0xee}), []byte{0xee, 0x0a, 0x00}; !bytes.Equal(got, want) {
		t.Errorf("got % x, want % x", got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	many := make([]int64, 1000)
	manyF := make([]float32, 1000)
	for i := range many {
		many[i] = int64(i) * 1e12
		manyF[i] = float32(i) / 7
	}
	tests := []struct {
		name  string
		feats []feat
	}{
		{"no features", nil},
		{"empty int64 list", []feat{{Name: "x", Kind: KindInt64, Ints: []int64{}}}},
		{"empty float list", []feat{{Name: "x", Kind: KindFloat, Floats: []uint32{}}}},
		{"empty bytes list", []feat{{Name: "x", Kind: KindBytes, Bytes: [][]byte{}}}},
		{"empty name", []feat{{Name: "", Kind: KindInt64, Ints: []int64{7}}}},
		{"int64 extremes", []feat{{Name: "i", Kind: KindInt64, Ints: []int64{0, 1, -1, math.MaxInt64, math.MinInt64}}}},
		{"float specials", []feat{{Name: "f", Kind: KindFloat, Floats: floatBits(0, float32(math.Copysign(0, -1)), 1e-45, math.MaxFloat32,
			float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()))}}},
		{"bytes with empty and binary values", []feat{{Name: "b", Kind: KindBytes, Bytes: [][]byte{{}, {0, 1, 0xff}, bytes.Repeat([]byte("z"), 300)}}}},
		{"long lists need multi-byte lengths", []feat{
			{Name: "ints", Kind: KindInt64, Ints: many},
			{Name: "floats", Kind: KindFloat, Floats: floatBits(manyF...)},
		}},
		{"long unicode name", []feat{{Name: strings.Repeat("é", 200), Kind: KindInt64, Ints: []int64{1}}}},
		{"all kinds in insertion order", []feat{
			{Name: "z", Kind: KindBytes, Bytes: [][]byte{[]byte("jpeg")}},
			{Name: "a", Kind: KindInt64, Ints: []int64{3}},
			{Name: "m", Kind: KindFloat, Floats: floatBits(0.5, -2)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeAll(build(tt.feats))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.feats) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, tt.feats)
			}
		})
	}
}

func TestBuilderResetReusesAndIsDeterministic(t *testing.T) {
	var b Builder
	b.Int64("junk", 1, 2, 3)
	b.Reset()
	b.Float("f", 1, 2)
	first := b.AppendTo(nil)
	b.Reset()
	b.Float("f", 1, 2)
	if second := b.AppendTo(nil); !bytes.Equal(first, second) {
		t.Errorf("same features encoded differently after Reset:\n% x\n% x", first, second)
	}
	var fresh Builder
	fresh.Float("f", 1, 2)
	if got := fresh.AppendTo(nil); !bytes.Equal(got, first) {
		t.Errorf("reused builder differs from a fresh one:\n% x\n% x", first, got)
	}
}

// Helpers that build wire messages by hand, for decoder tests.
func msgField(b []byte, num protowire.Number, body []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// example wraps Feature message bodies into an Example, one map entry each.
func example(names []string, features ...[]byte) []byte {
	var fs []byte
	for i, f := range features {
		entry := msgField(nil, entryKey, []byte(names[i]))
		entry = msgField(entry, entryValue, f)
		fs = msgField(fs, featuresFeature, entry)
	}
	return msgField(nil, exampleFeatures, fs)
}

func varintField(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func fixed32Field(num protowire.Number, v uint32) []byte {
	return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), v)
}

func TestDecodeAcceptsUnpackedAndSplitLists(t *testing.T) {
	neg := uint64(math.MaxUint64) // -1 as a varint
	tests := []struct {
		name    string
		feature []byte
		want    feat
	}{
		{"unpacked int64", msgField(nil, featureInt64, cat(varintField(1, 5), varintField(1, neg))),
			feat{Kind: KindInt64, Ints: []int64{5, -1}}},
		{"unpacked float", msgField(nil, featureFloat, cat(fixed32Field(1, math.Float32bits(2.5)), fixed32Field(1, math.Float32bits(-1)))),
			feat{Kind: KindFloat, Floats: floatBits(2.5, -1)}},
		{"packed and unpacked int64 mixed", msgField(nil, featureInt64, cat(
			varintField(1, 1),
			msgField(nil, 1, protowire.AppendVarint(protowire.AppendVarint(nil, 2), 3)),
			varintField(1, 4))),
			feat{Kind: KindInt64, Ints: []int64{1, 2, 3, 4}}},
		{"list split over two fields concatenates", cat(
			msgField(nil, featureFloat, fixed32Field(1, math.Float32bits(1))),
			msgField(nil, featureFloat, fixed32Field(1, math.Float32bits(2)))),
			feat{Kind: KindFloat, Floats: floatBits(1, 2)}},
		{"last kind of the oneof wins", cat(
			msgField(nil, featureInt64, varintField(1, 9)),
			msgField(nil, featureBytes, msgField(nil, 1, []byte("x"))),
			msgField(nil, featureInt64, varintField(1, 7))),
			feat{Kind: KindInt64, Ints: []int64{7}}},
		{"feature with no list", nil, feat{Kind: KindNone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeAll(example([]string{"n"}, tt.feature))
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Name = "n"
			if !reflect.DeepEqual(got, []feat{tt.want}) {
				t.Errorf("got %+v, want %+v", got, []feat{tt.want})
			}
		})
	}
}

func TestDecodeSkipsUnknownFields(t *testing.T) {
	unknown := cat(
		varintField(15, 1),
		protowire.AppendFixed64(protowire.AppendTag(nil, 16, protowire.Fixed64Type), 2),
		fixed32Field(17, 3),
		msgField(nil, 18, []byte("junk")),
		protowire.AppendTag(protowire.AppendTag(nil, 19, protowire.StartGroupType), 19, protowire.EndGroupType),
	)
	// Known field numbers with the wrong wire type are unknown fields too.
	list := cat(unknown, varintField(1, 4), fixed32Field(1, 5), msgField(nil, 1, []byte{6}))
	feature := cat(unknown, varintField(featureInt64, 1), msgField(nil, featureInt64, list))
	entry := cat(unknown, varintField(entryKey, 1), msgField(nil, entryKey, []byte("k")), msgField(nil, entryValue, feature))
	features := cat(unknown, varintField(featuresFeature, 1), msgField(nil, featuresFeature, entry))
	ex := cat(unknown, varintField(exampleFeatures, 1), msgField(nil, exampleFeatures, features), unknown)

	got, err := decodeAll(ex)
	if err != nil {
		t.Fatal(err)
	}
	want := []feat{{Name: "k", Kind: KindInt64, Ints: []int64{4, 6}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestLookupReturnsLastOccurrence(t *testing.T) {
	var b Builder
	b.Int64("label", 1)
	b.Float("x", 0.5)
	b.Int64("label", 2)
	ex := b.AppendTo(nil)

	f, ok, err := Lookup(ex, "label")
	if err != nil || !ok {
		t.Fatalf("Lookup(label) = %v, %v", ok, err)
	}
	if got, _ := f.AppendInt64s(nil); !reflect.DeepEqual(got, []int64{2}) {
		t.Errorf("label = %v, want [2]", got)
	}
	if _, ok, err := Lookup(ex, "missing"); ok || err != nil {
		t.Errorf("Lookup(missing) = %v, %v; want false, nil", ok, err)
	}
}

func TestAccessorOfWrongKindFails(t *testing.T) {
	var b Builder
	b.Float("f", 1)
	f, _, err := Lookup(b.AppendTo(nil), "f")
	if err != nil {
		t.Fatal(err)
	}
	dst := []int64{42}
	got, err := f.AppendInt64s(dst)
	if err == nil || !strings.Contains(err.Error(), "float_list, not int64_list") {
		t.Errorf("AppendInt64s on a float feature: err = %v", err)
	}
	if !reflect.DeepEqual(got, dst) {
		t.Errorf("dst changed on error: %v", got)
	}
	if _, err := f.AppendBytes(nil); err == nil {
		t.Error("AppendBytes on a float feature: no error")
	}
}

func TestMalformedInputReportsWhereAndWhat(t *testing.T) {
	packedFloat7 := example([]string{"f"}, msgField(nil, featureFloat, msgField(nil, 1, make([]byte, 7))))
	badPacked := example([]string{"i"}, msgField(nil, featureInt64, msgField(nil, 1, []byte{0x01, 0x80})))
	tests := []struct {
		name    string
		in      []byte
		msg     string
		field   int
		offset  int
		wantErr error
	}{
		{"truncated length", []byte{0x0a, 0x05, 0x0a}, "Example", 1, 0, io.ErrUnexpectedEOF},
		{"truncated tag", []byte{0x80}, "Example", 0, 0, io.ErrUnexpectedEOF},
		{"field number zero", []byte{0x00, 0x00}, "Example", 0, 0, nil},
		{"field number too large", protowire.AppendTag(nil, protowire.MaxValidNumber+1, protowire.VarintType), "Example", 0, 0, nil},
		{"stray end group", []byte{0x0c}, "Example", 1, 0, nil},
		{"varint overflow", append([]byte{0x08}, bytes.Repeat([]byte{0xff}, 10)...), "Example", 1, 0, nil},
		{"entry truncated inside features", []byte{0x0a, 0x02, 0x0a, 0x05}, "Features", 1, 2, io.ErrUnexpectedEOF},
		{"key not UTF-8", example([]string{"\xff"}, nil), "Features.FeatureEntry", 1, 4, nil},
		// The packed field's tag is at offset 11: the Example, Features,
		// entry, value and float_list headers take 2 bytes each, key "f" 3.
		{"packed float length not a multiple of 4", packedFloat7, "FloatList", 1, 11, nil},
		{"truncated packed varint", badPacked, "Int64List", 1, 14, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeAll(tt.in)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a *DecodeError", err)
			}
			if de.Message != tt.msg || de.Field != tt.field || de.Offset != tt.offset {
				t.Errorf("err = %v: got message %q field %d offset %d, want %q %d %d",
					err, de.Message, de.Field, de.Offset, tt.msg, tt.field, tt.offset)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.wantErr)
			}
		})
	}
}

func TestEveryTruncationIsAnError(t *testing.T) {
	var b Builder
	b.Int64("label", 3)
	b.Float("features", 1, 2, 3)
	b.Bytes("raw", []byte("abc"))
	ex := b.AppendTo(nil)
	for n := 1; n < len(ex); n++ {
		if _, err := decodeAll(ex[:n]); err == nil {
			t.Errorf("prefix of %d/%d bytes decoded without error", n, len(ex))
		}
	}
}

func TestBuildAndDecodeDoNotAllocate(t *testing.T) {
	var b Builder
	feats := make([]float32, 32)
	var out []byte
	var ints []int64
	var floats []float32
	run := func() {
		b.Reset()
		b.Int64("label", 3)
		b.Float("features", feats...)
		b.Int64("id", 123456)
		out = b.AppendTo(out[:0])
		err := Features(out, func(name []byte, f Feature) error {
			var err error
			switch string(name) {
			case "label", "id":
				ints, err = f.AppendInt64s(ints[:0])
			case "features":
				floats, err = f.AppendFloats(floats[:0])
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	run() // grow the buffers
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("%v allocations per build and decode, want 0", n)
	}
}

func FuzzDecode(f *testing.F) {
	var b Builder
	b.Int64("label", 1, -5)
	b.Float("features", 0.25, 3)
	b.Bytes("raw", []byte("x"), nil)
	b.Int64("empty")
	f.Add(b.AppendTo(nil))
	f.Add([]byte{})
	f.Add(example([]string{"n"}, msgField(nil, featureInt64, cat(varintField(1, 5), msgField(nil, featureFloat, nil)))))
	f.Add(example([]string{"f"}, msgField(nil, featureFloat, fixed32Field(1, 7))))
	f.Add([]byte{0x0a, 0x05, 0x0a, 0x03, 0x12, 0x01, 0x00})

	f.Fuzz(func(t *testing.T, in []byte) {
		structErr := Features(in, func([]byte, Feature) error { return nil })
		if _, _, err := Lookup(in, "label"); (err == nil) != (structErr == nil) {
			t.Errorf("Lookup and Features disagree: %v vs %v", err, structErr)
		}
		feats, err := decodeAll(in)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same,
		// except features with no list, which a Builder cannot write.
		var want []feat
		for _, f := range feats {
			if f.Kind != KindNone {
				want = append(want, f)
			}
		}
		got, err := decodeAll(build(feats))
		if err != nil {
			t.Fatalf("re-encoding of %+v does not decode: %v", feats, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("re-encoded:\n got %+v\nwant %+v", got, want)
		}
	})
}
