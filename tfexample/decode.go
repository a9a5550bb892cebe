package tfexample

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Kind says which list of its oneof a Feature holds.
type Kind uint8

// The kinds of a Feature. KindNone is a Feature with no list set.
const (
	KindNone  Kind = iota
	KindBytes      // bytes_list
	KindFloat      // float_list
	KindInt64      // int64_list
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "no list"
	case KindBytes:
		return "bytes_list"
	case KindFloat:
		return "float_list"
	case KindInt64:
		return "int64_list"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// A DecodeError reports malformed input.
type DecodeError struct {
	Offset  int    // byte offset in the Example of the field, or of the tag, at fault
	Message string // the message being read, such as "Int64List"
	Field   int    // the field number, or 0 if the tag itself could not be read
	Err     error  // what is wrong
}

func (e *DecodeError) Error() string {
	if e.Field == 0 {
		return fmt.Sprintf("tfexample: %s field tag at offset %d: %v", e.Message, e.Offset, e.Err)
	}
	return fmt.Sprintf("tfexample: %s field %d at offset %d: %v", e.Message, e.Field, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// A Feature is one feature of an encoded Example, read in place: it refers to
// the Example's bytes, which must not change while it is in use. Its values
// are checked when they are read, by the Append methods.
//
// Decoding follows protobuf semantics: a list field may be split over
// several occurrences, whose values are concatenated; when fields of
// different kinds occur, the last one wins; repeated scalars are accepted
// packed and unpacked; unknown fields, and known fields of an unexpected wire
// type, are skipped.
type Feature struct {
	kind  Kind
	entry []byte // the map entry that holds the feature
	base  int    // offset of entry[0] in the Example
}

// Kind returns which list the feature holds.
func (f Feature) Kind() Kind { return f.kind }

// AppendInt64s appends the values of an int64_list feature to dst. On error,
// it returns dst unchanged.
func (f Feature) AppendInt64s(dst []int64) ([]int64, error) {
	if err := f.want(KindInt64); err != nil {
		return dst, err
	}
	n0 := len(dst)
	err := f.lists(func(list []byte, base int) error {
		w := walker{b: list, base: base, msg: "Int64List"}
		var v field
		for {
			ok, err := w.next(&v)
			if err != nil || !ok {
				return err
			}
			if v.num != listValue {
				continue
			}
			switch v.typ {
			case protowire.VarintType:
				dst = append(dst, int64(v.u))
			case protowire.BytesType: // packed
				for p := v.val; len(p) > 0; {
					x, n := protowire.ConsumeVarint(p)
					if n < 0 {
						off := v.valOff + len(v.val) - len(p)
						return &DecodeError{off, w.msg, int(listValue), fmt.Errorf("packed value: %w", protowire.ParseError(n))}
					}
					dst = append(dst, int64(x))
					p = p[n:]
				}
			}
		}
	}, func() { dst = dst[:n0] })
	if err != nil {
		return dst[:n0], err
	}
	return dst, nil
}

// AppendFloats appends the values of a float_list feature to dst. On error,
// it returns dst unchanged.
func (f Feature) AppendFloats(dst []float32) ([]float32, error) {
	if err := f.want(KindFloat); err != nil {
		return dst, err
	}
	n0 := len(dst)
	err := f.lists(func(list []byte, base int) error {
		w := walker{b: list, base: base, msg: "FloatList"}
		var v field
		for {
			ok, err := w.next(&v)
			if err != nil || !ok {
				return err
			}
			if v.num != listValue {
				continue
			}
			switch v.typ {
			case protowire.Fixed32Type:
				dst = append(dst, math.Float32frombits(uint32(v.u)))
			case protowire.BytesType: // packed
				if len(v.val)%4 != 0 {
					return &DecodeError{v.off, w.msg, int(listValue), fmt.Errorf("packed length %d is not a multiple of 4", len(v.val))}
				}
				for p := v.val; len(p) > 0; {
					x, n := protowire.ConsumeFixed32(p)
					dst = append(dst, math.Float32frombits(x))
					p = p[n:]
				}
			}
		}
	}, func() { dst = dst[:n0] })
	if err != nil {
		return dst[:n0], err
	}
	return dst, nil
}

// AppendBytes appends the values of a bytes_list feature to dst. The
// appended slices alias the Example's bytes. On error, it returns dst
// unchanged.
func (f Feature) AppendBytes(dst [][]byte) ([][]byte, error) {
	if err := f.want(KindBytes); err != nil {
		return dst, err
	}
	n0 := len(dst)
	err := f.lists(func(list []byte, base int) error {
		w := walker{b: list, base: base, msg: "BytesList"}
		var v field
		for {
			ok, err := w.next(&v)
			if err != nil || !ok {
				return err
			}
			if v.num == listValue && v.typ == protowire.BytesType {
				dst = append(dst, v.val)
			}
		}
	}, func() { dst = dst[:n0] })
	if err != nil {
		return dst[:n0], err
	}
	return dst, nil
}

func (f Feature) want(k Kind) error {
	if f.kind != k {
		return fmt.Errorf("tfexample: feature holds %v, not %v", f.kind, k)
	}
	return nil
}

// lists calls list for the body of every list message of f's kind, in wire
// order, and reset whenever a list of another kind occurs: by oneof
// semantics, such a list clears what came before it.
func (f Feature) lists(list func(b []byte, base int) error, reset func()) error {
	ew := walker{b: f.entry, base: f.base, msg: "Features.FeatureEntry"}
	var e field
	for {
		ok, err := ew.next(&e)
		if err != nil || !ok {
			return err
		}
		if e.num != entryValue || e.typ != protowire.BytesType {
			continue
		}
		fw := walker{b: e.val, base: e.valOff, msg: "Feature"}
		var l field
		for {
			ok, err := fw.next(&l)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			switch k := kindOf(l); {
			case k == f.kind:
				if err := list(l.val, l.valOff); err != nil {
					return err
				}
			case k != KindNone:
				reset()
			}
		}
	}
}

// kindOf returns the kind of list that the Feature field f holds, or KindNone
// if f is not a list.
func kindOf(f field) Kind {
	if f.typ != protowire.BytesType {
		return KindNone
	}
	switch f.num {
	case featureBytes:
		return KindBytes
	case featureFloat:
		return KindFloat
	case featureInt64:
		return KindInt64
	}
	return KindNone
}

// Features calls fn for every feature of the encoded Example b, in wire
// order, with the feature's name, which aliases b. It checks the encoding
// down to each Feature message; the list values are checked when read. If a
// name occurs more than once, fn sees every occurrence; a protobuf parser
// keeps the last. An error from fn stops the walk and is returned as is.
func Features(b []byte, fn func(name []byte, f Feature) error) error {
	ew := walker{b: b, msg: "Example"}
	var e field
	for {
		ok, err := ew.next(&e)
		if err != nil || !ok {
			return err
		}
		if e.num != exampleFeatures || e.typ != protowire.BytesType {
			continue
		}
		// A repeated features field merges into one map, so its entries
		// simply follow the earlier ones.
		fw := walker{b: e.val, base: e.valOff, msg: "Features"}
		var m field
		for {
			ok, err := fw.next(&m)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if m.num != featuresFeature || m.typ != protowire.BytesType {
				continue
			}
			name, f, err := parseEntry(m.val, m.valOff)
			if err != nil {
				return err
			}
			if err := fn(name, f); err != nil {
				return err
			}
		}
	}
}

// parseEntry checks the map entry b, which starts at offset base of the
// Example, and returns its key and value.
func parseEntry(b []byte, base int) ([]byte, Feature, error) {
	const msg = "Features.FeatureEntry"
	f := Feature{entry: b, base: base}
	var name []byte
	ew := walker{b: b, base: base, msg: msg}
	var e field
	for {
		ok, err := ew.next(&e)
		if err != nil {
			return nil, Feature{}, err
		}
		if !ok {
			break
		}
		if e.typ != protowire.BytesType {
			continue
		}
		switch e.num {
		case entryKey:
			if !utf8.Valid(e.val) {
				return nil, Feature{}, &DecodeError{e.off, msg, int(entryKey), errors.New("key is not valid UTF-8")}
			}
			name = e.val
		case entryValue:
			// Fields of a repeated value merge, so the kind is that of the
			// last list in any of them.
			fw := walker{b: e.val, base: e.valOff, msg: "Feature"}
			var l field
			for {
				ok, err := fw.next(&l)
				if err != nil {
					return nil, Feature{}, err
				}
				if !ok {
					break
				}
				if k := kindOf(l); k != KindNone {
					f.kind = k
				}
			}
		}
	}
	return name, f, nil
}

// Lookup returns the feature called name in the encoded Example b, and
// whether there is one. If the name occurs more than once, the last
// occurrence is returned, as a protobuf parser would. The whole Example is
// checked as by Features.
func Lookup(b []byte, name string) (Feature, bool, error) {
	var found Feature
	ok := false
	err := Features(b, func(n []byte, f Feature) error {
		if string(n) == name {
			found, ok = f, true
		}
		return nil
	})
	if err != nil {
		return Feature{}, false, err
	}
	return found, ok, nil
}

// A walker reads the fields of one message body b, which starts at offset
// base of the Example.
type walker struct {
	b    []byte
	base int
	pos  int
	msg  string // message name, for errors
}

// A field is one field read by a walker.
type field struct {
	num    protowire.Number
	typ    protowire.Type
	off    int    // offset of the tag in the Example
	val    []byte // the payload of a BytesType field
	valOff int    // offset of val[0] in the Example
	u      uint64 // the value of a VarintType or Fixed32Type field
}

// next reads the next field into f. It returns false at the end of the
// message.
func (w *walker) next(f *field) (bool, error) {
	if w.pos >= len(w.b) {
		return false, nil
	}
	rest := w.b[w.pos:]
	off := w.base + w.pos
	num, typ, n := protowire.ConsumeTag(rest)
	if n < 0 {
		return false, &DecodeError{off, w.msg, 0, protowire.ParseError(n)}
	}
	if num > protowire.MaxValidNumber {
		return false, &DecodeError{off, w.msg, 0, fmt.Errorf("field number %d out of range", num)}
	}
	rest = rest[n:]
	var m int
	switch typ {
	case protowire.BytesType:
		f.val, m = protowire.ConsumeBytes(rest)
		f.valOff = off + n + m - len(f.val)
	case protowire.VarintType:
		f.u, m = protowire.ConsumeVarint(rest)
	case protowire.Fixed32Type:
		var v uint32
		v, m = protowire.ConsumeFixed32(rest)
		f.u = uint64(v)
	default:
		m = protowire.ConsumeFieldValue(num, typ, rest)
	}
	if m < 0 {
		return false, &DecodeError{off, w.msg, int(num), protowire.ParseError(m)}
	}
	f.num, f.typ, f.off = num, typ, off
	w.pos += n + m
	return true, nil
}
