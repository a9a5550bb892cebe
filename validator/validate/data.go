package validate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/validator"
)

// trainFiles trains on the source files read in their order, every
// epoch: the "none" strategy without a mount or an index, in any format.
func (v *validation) trainFiles(ctx context.Context, dec validator.Decoder, test *validator.TestSet, classes int, files []string) (validator.Report, error) {
	var report validator.Report
	v.log.Info("training on the source files in their order", "files", len(files), "test_records", test.Len(),
		"features", test.Dim, "classes", classes, "model", v.Model, "format", dec.Format().Name())
	model, err := validator.NewModel(v.Model, test.Dim, classes)
	if err != nil {
		return report, err
	}
	seq := func() (io.ReadCloser, error) { return &validator.Sequence{Paths: files}, nil }
	tr := &validator.Trainer{Model: model, Decoder: dec, LR: v.LR, Decay: v.Decay, L2: v.L2, Batch: v.Batch, TrainSet: seq, Logger: v.log}
	run, err := tr.Train(ctx, "none", v.Epochs, func(int) (io.ReadCloser, error) { return seq() }, test)
	if err != nil {
		return report, err
	}
	report.Runs = append(report.Runs, run)
	return report, nil
}

// dataFormat sets the format of Data (Decode.Format, or chosen from the
// file extensions) and the globs of its files, and returns its files in
// their order.
func (v *validation) dataFormat() ([]string, error) {
	o := formats.Options{NoHeader: v.Decode.NoHeader, RecordSize: v.Decode.RecordSize, HeaderBytes: v.Decode.HeaderBytes}
	name := v.Decode.Format
	if name == "" {
		all, err := formatFiles(v.data, []string{"*"})
		if err != nil {
			return nil, err
		}
		f, err := formats.Detect(all, o)
		if errors.Is(err, formats.ErrNoFormat) {
			return nil, optionErrorf("format", "no data files in %s: none has the extension of a format (%s); pass {format}", v.Data, strings.Join(formats.AllIncludes(), " "))
		}
		if err != nil {
			return nil, err
		}
		name = f.Name()
	}
	f, err := formats.Lookup(name, o)
	if err != nil {
		return nil, &mount.OptionError{Option: "format", Reason: "{format}: " + err.Error(), Err: err}
	}
	v.format = f
	v.include = v.Mount.Include
	if v.include == nil || slices.Equal(v.include, formats.TFRecord{}.Include()) {
		// The default Include is TFRecord's; the index and the mounts
		// then take the format's own.
		v.include = f.Include()
	}
	return formatFiles(v.data, v.include)
}

// decoder returns the decoder of the records of the format that Decode
// describes. files are the data and test files, for the dimension of
// libsvm data.
func (v *validation) decoder(files []string) (validator.Decoder, error) {
	d := v.Decode
	switch f := v.format.(type) {
	case formats.TFRecord:
		return validator.ExampleDecoder{Label: cmp.Or(d.Label, "label"), Features: cmp.Or(d.Features, "features")}, nil
	case formats.CSV:
		ignore := d.IgnoreColumns
		if !d.IgnoreGiven {
			ignore = []string{"id"}
		}
		return &validator.CSVDecoder{NoHeader: !f.Header, Label: cmp.Or(d.LabelColumn, "label"), Ignore: ignore, Divide: float32(d.Divide)}, nil
	case formats.JSONL:
		return &validator.JSONLDecoder{Label: d.Label, Features: d.Features, Divide: float32(d.Divide)}, nil
	case formats.LibSVM:
		if d.Features != "" {
			n, err := strconv.Atoi(d.Features)
			if err != nil || n < 1 {
				return nil, optionErrorf("features", "{features} %q: for libsvm, the number of features", d.Features)
			}
			return &validator.LibSVMDecoder{Dim: n, Divide: float32(d.Divide)}, nil
		}
		dim, err := validator.LibSVMDim(func(p string) (io.ReadCloser, error) { return os.Open(p) }, files...)
		if err != nil {
			return nil, err
		}
		return &validator.LibSVMDecoder{Dim: dim, Divide: float32(d.Divide)}, nil
	case formats.WDS:
		return &validator.WDSDecoder{Label: d.Label, Features: d.Features}, nil
	case formats.NPY, formats.Fixed:
		rd := &validator.RowDecoder{}
		if fx, ok := f.(formats.Fixed); ok {
			rd.Fixed = &fx
		}
		if d.LabelColumn != "" {
			n, err := strconv.Atoi(d.LabelColumn)
			if err != nil || n < 0 {
				return nil, optionErrorf("label-column", "{label-column} %q: for %s, a column number from 0", d.LabelColumn, f.Name())
			}
			rd.Label = n
		}
		for _, c := range d.IgnoreColumns {
			n, err := strconv.Atoi(c)
			if err != nil || n < 0 {
				return nil, optionErrorf("ignore-columns", "{ignore-columns} %q: for %s, column numbers from 0", strings.Join(d.IgnoreColumns, ","), f.Name())
			}
			rd.Ignore = append(rd.Ignore, n)
		}
		return rd, nil
	}
	return nil, optionErrorf("format", "validate does not read {format} %s", v.format.Name())
}

// formatFiles returns the files under dir whose base name matches one of
// include, in lexical order.
func formatFiles(dir string, include []string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		for _, pat := range include {
			if ok, _ := filepath.Match(pat, e.Name()); ok {
				files = append(files, p)
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files matching %s in %s", strings.Join(include, ","), dir)
	}
	return files, nil
}
