// Package tfexample encodes and decodes tf.train.Example protocol buffer
// messages, the usual payload of TFRecord files, directly on the wire format.
// A Builder writes Examples with no per-record allocation, and Features and
// Lookup read them in place so that a validator can check millions of records
// with reused buffers.
//
// The schema handled is that of tensorflow/core/example/{example,feature}.proto:
//
//	message Example   { Features features = 1; }
//	message Features  { map<string, Feature> feature = 1; }
//	message Feature   { oneof kind { BytesList bytes_list = 1;
//	                                 FloatList float_list = 2;
//	                                 Int64List int64_list = 3; } }
//	message BytesList { repeated bytes value = 1; }
//	message FloatList { repeated float value = 1 [packed = true]; }
//	message Int64List { repeated int64 value = 1 [packed = true]; }
package tfexample

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the schema.
const (
	exampleFeatures protowire.Number = 1 // Example.features
	featuresFeature protowire.Number = 1 // Features.feature (map entries)
	entryKey        protowire.Number = 1 // map entry key
	entryValue      protowire.Number = 2 // map entry value
	featureBytes    protowire.Number = 1 // Feature.bytes_list
	featureFloat    protowire.Number = 2 // Feature.float_list
	featureInt64    protowire.Number = 3 // Feature.int64_list
	listValue       protowire.Number = 1 // {Bytes,Float,Int64}List.value
)

// A Builder encodes one Example at a time. Add features with Int64, Float and
// Bytes, take the encoding with AppendTo, then Reset and start the next one.
// A Builder reuses its buffer, so once it has grown to the size of the largest
// Example it encodes without allocating.
//
// Features are encoded in the order they were added, so the same calls give
// the same bytes. Names must be valid UTF-8 (proto3 string keys); decoders,
// this package's included, reject other names. Adding a name twice encodes
// both entries, and a protobuf parser keeps the later one.
//
// The zero value is an empty Builder ready to use.
type Builder struct {
	buf []byte // body of the Features message: its map entries
}

// Reset discards the features added so far, keeping the buffer.
func (b *Builder) Reset() { b.buf = b.buf[:0] }

// Int64 adds a feature holding an int64_list with the values v, packed.
func (b *Builder) Int64(name string, v ...int64) {
	n := 0
	for _, x := range v {
		n += protowire.SizeVarint(uint64(x))
	}
	b.appendHead(name, featureInt64, packedSize(n))
	b.appendPackedHead(n)
	for _, x := range v {
		b.buf = protowire.AppendVarint(b.buf, uint64(x))
	}
}

// Float adds a feature holding a float_list with the values v, packed.
func (b *Builder) Float(name string, v ...float32) {
	n := len(v) * protowire.SizeFixed32()
	b.appendHead(name, featureFloat, packedSize(n))
	b.appendPackedHead(n)
	for _, x := range v {
		b.buf = protowire.AppendFixed32(b.buf, math.Float32bits(x))
	}
}

// Bytes adds a feature holding a bytes_list with the values v.
func (b *Builder) Bytes(name string, v ...[]byte) {
	n := 0
	for _, x := range v {
		n += protowire.SizeTag(listValue) + protowire.SizeBytes(len(x))
	}
	b.appendHead(name, featureBytes, n)
	for _, x := range v {
		b.buf = protowire.AppendTag(b.buf, listValue, protowire.BytesType)
		b.buf = protowire.AppendBytes(b.buf, x)
	}
}

// packedSize returns the size of a list message whose values take n bytes
// packed. An empty list is an empty message: proto3 writes no packed field
// for it.
func packedSize(n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(listValue) + protowire.SizeBytes(n)
}

// appendPackedHead appends the tag and length of packed values taking n
// bytes, if there are any.
func (b *Builder) appendPackedHead(n int) {
	if n > 0 {
		b.buf = protowire.AppendTag(b.buf, listValue, protowire.BytesType)
		b.buf = protowire.AppendVarint(b.buf, uint64(n))
	}
}

// appendHead appends a map entry for name up to the start of the body of its
// list message, which has the given kind (Feature field number) and size.
// The caller appends the body. An empty list still gets its (empty) list
// message, which keeps the kind of the feature.
func (b *Builder) appendHead(name string, kind protowire.Number, size int) {
	feature := protowire.SizeTag(kind) + protowire.SizeBytes(size)
	entry := protowire.SizeTag(entryKey) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(entryValue) + protowire.SizeBytes(feature)

	buf := protowire.AppendTag(b.buf, featuresFeature, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(entry))
	buf = protowire.AppendTag(buf, entryKey, protowire.BytesType)
	buf = protowire.AppendString(buf, name)
	buf = protowire.AppendTag(buf, entryValue, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(feature))
	buf = protowire.AppendTag(buf, kind, protowire.BytesType)
	b.buf = protowire.AppendVarint(buf, uint64(size))
}

// AppendTo appends the encoded Example to dst and returns the extended
// slice. The features field is always present, even when no feature was
// added.
func (b *Builder) AppendTo(dst []byte) []byte {
	dst = protowire.AppendTag(dst, exampleFeatures, protowire.BytesType)
	return protowire.AppendBytes(dst, b.buf)
}
