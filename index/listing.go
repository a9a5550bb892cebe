package index

// The listing of a dataset: the files of a source that an index covers,
// and the format they are read in.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
)

// SourceBytes returns the bytes of the files an index of src built with o
// would cover, from a listing alone (no file is read): what the default
// block size and buffer are chosen from before indexing (package sizing).
// A compressed file counts its stored bytes, a lower bound of the
// decompressed stream its blocks are cut from.
func SourceBytes(ctx context.Context, src source.Source, o Options) (int64, error) {
	o.fill()
	// The listing of Build logs what it skips; this one stays quiet, so
	// that each is said once.
	o.Logger = slog.New(slog.DiscardHandler)
	files, _, err := selectFiles(ctx, src, o)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n, nil
}

// listSource lists the files of a source whose base names match include.
func listSource(ctx context.Context, src source.Source, include []string) ([]File, error) {
	for _, p := range include {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("bad {include} pattern %q: %w", p, err)
		}
	}
	objs, err := src.List(ctx, func(name string) bool {
		return slices.ContainsFunc(include, func(p string) bool {
			ok, _ := filepath.Match(p, name)
			return ok
		})
	})
	if err != nil {
		return nil, err
	}
	files := make([]File, len(objs))
	for i, o := range objs {
		files[i] = File{Path: o.Path, Size: o.Size, Mtime: o.Mtime, Version: o.Version}
	}
	return files, nil
}

// selectFiles lists the files of the dataset in src and the format
// they are read in: o.Format, or the one their names say (formats.Detect,
// over the names of every format's files when o.Include is empty). Build
// and the check of a cached index select files the same way.
func selectFiles(ctx context.Context, src source.Source, o Options) ([]File, formats.Format, error) {
	root := src.String()
	include := o.Include
	switch {
	case len(include) > 0:
	case o.Format != nil:
		include = compressedInclude(o.Format.Include(), o)
	default:
		include = compressedInclude(formats.AllIncludes(), o)
	}
	if ls, ok := src.(source.Logged); ok {
		src = ls.WithLogger(o.Logger)
	}
	files, err := listSource(ctx, src, include)
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no files matching %s under %s (set {include} to choose other names, {format} to say the format)", strings.Join(include, " or "), root)
	}
	f := o.Format
	if f == nil {
		names := make([]string, len(files))
		for i, fl := range files {
			names[i] = detectName(fl.Path, o)
		}
		f, err = formats.Detect(names, o.FormatOptions)
		switch {
		case errors.Is(err, formats.ErrNoFormat) && len(o.Include) > 0:
			// Files picked by --include under names of no format
			// (data.rec) are TFRecord, as before formats were detected:
			// a file that is not fails its frame check when indexed.
			f = formats.TFRecord{}
		case err != nil:
			return nil, nil, fmt.Errorf("source %s: %w", root, err)
		}
		if len(o.Include) == 0 {
			// Detect passed over names of no format and a README.txt
			// beside the data: keep the chosen format's files only.
			include = compressedInclude(f.Include(), o)
			files = slices.DeleteFunc(files, func(fl File) bool {
				return !slices.ContainsFunc(include, func(p string) bool {
					ok, _ := filepath.Match(p, path.Base(fl.Path))
					return ok
				})
			})
		}
	}
	return files, f, nil
}
