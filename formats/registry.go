package formats

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Options are the settings some formats take, from the command line.
// The zero value is the default of every format.
type Options struct {
	// NoHeader says CSV files have no header row (--header=false).
	NoHeader bool
	// CheckJSON makes jsonl check that every line is one JSON value.
	CheckJSON bool
	// RecordSize and HeaderBytes describe fixed-size records: files are
	// HeaderBytes of header followed by records of RecordSize bytes.
	RecordSize, HeaderBytes int64
}

// formatTable lists every format, in the order Names gives them. New
// formats are added here and nowhere else.
var formatTable = []struct {
	name string
	make func(Options) (Format, error)
}{
	{"tfrecord", func(Options) (Format, error) { return TFRecord{}, nil }},
	{"csv", func(o Options) (Format, error) { return CSV{Header: !o.NoHeader}, nil }},
	{"jsonl", func(o Options) (Format, error) { return JSONL{Check: o.CheckJSON}, nil }},
	{"libsvm", func(Options) (Format, error) { return LibSVM{}, nil }},
	{"lines", func(Options) (Format, error) { return Lines{}, nil }},
	{"wds", func(Options) (Format, error) { return WDS{}, nil }},
	{"npy", func(Options) (Format, error) { return NPY{}, nil }},
	{"fixed", func(o Options) (Format, error) {
		if o.RecordSize <= 0 || o.HeaderBytes < 0 {
			return nil, fmt.Errorf("format fixed needs {record-size} N > 0 (and {header-bytes} H >= 0), got %d and %d", o.RecordSize, o.HeaderBytes)
		}
		return Fixed{RecordSize: o.RecordSize, HeaderBytes: o.HeaderBytes}, nil
	}},
}

// OptionsOf returns the Options that Lookup(f.Name(), o) makes f with.
func OptionsOf(f Format) Options {
	switch f := f.(type) {
	case CSV:
		return Options{NoHeader: !f.Header}
	case JSONL:
		return Options{CheckJSON: f.Check}
	case Fixed:
		return Options{RecordSize: f.RecordSize, HeaderBytes: f.HeaderBytes}
	}
	return Options{}
}

// Names returns the names of all formats.
func Names() []string {
	names := make([]string, len(formatTable))
	for i, f := range formatTable {
		names[i] = f.name
	}
	return names
}

// Lookup returns the format called name, set up with o.
func Lookup(name string, o Options) (Format, error) {
	for _, f := range formatTable {
		if f.name == name {
			return f.make(o)
		}
	}
	return nil, fmt.Errorf("unknown format %q; known formats: %s", name, strings.Join(Names(), ", "))
}

// AllIncludes returns the default include patterns of every format that
// Detect can choose, for listing a source before its format is known.
func AllIncludes() []string {
	var p []string
	for _, f := range formatTable {
		if f.name == "fixed" {
			continue
		}
		fm, _ := f.make(Options{})
		p = append(p, fm.Include()...)
	}
	return p
}

// ErrNoFormat is returned (wrapped) by Detect when no file name tells
// the format.
var ErrNoFormat = errors.New("no file has the extension of a known format; pass {format}")

// Detect chooses the format of a dataset from its file names (slash or
// OS paths), by the default include patterns of each format. Names that
// match no format are ignored; a dataset whose names match two formats is
// an error naming one file of each. "*.txt" is a weak match: a README.txt
// next to the data is not data, so lines is chosen only when no other
// format matched. Fixed-size records have no extension of their own and
// are never detected.
func Detect(names []string, o Options) (Format, error) {
	var found, weak Format
	var first string
	for _, n := range names {
		f := formatOf(path.Base(strings.ReplaceAll(n, "\\", "/")), o)
		switch {
		case f == nil:
		case f.Name() == "lines":
			weak = f
		case found == nil:
			found, first = f, n
		case f.Name() != found.Name():
			return nil, fmt.Errorf("the source mixes formats: %s is %s but %s is %s; pass {format}, or {include} to pick one kind of file", first, found.Name(), n, f.Name())
		}
	}
	switch {
	case found != nil:
		return found, nil
	case weak != nil:
		return weak, nil
	}
	return nil, ErrNoFormat
}

// formatOf returns the format whose include patterns match base, or nil.
func formatOf(base string, o Options) Format {
	for _, e := range formatTable {
		if e.name == "fixed" {
			continue
		}
		f, _ := e.make(o)
		for _, p := range f.Include() {
			if ok, _ := path.Match(p, base); ok {
				return f
			}
		}
	}
	return nil
}
