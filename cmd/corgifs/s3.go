package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/mount"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/source/s3"
)

// local returns the directory validate reads the files of --data from
// whole: the local copy of an s3:// one, else dir itself.
func (d *datasetFlags) local(dir string) string {
	if d.copied != "" {
		return d.copied
	}
	return dir
}

// copyForValidate opens the source of an s3:// --data, for the index and
// the epochs, which read the bucket, and copies its data objects into a
// temporary directory for what validate reads as whole local files: the
// format's detection, the libsvm dimension, --via files and the loss on
// the whole training set. An s3:// --test is copied too. The returned
// function removes the copies.
func (d *datasetFlags) copyForValidate(ctx context.Context, v *validateFlags, log *slog.Logger) (func(), error) {
	var dirs []string
	cleanup := func() {
		for _, dir := range dirs {
			os.RemoveAll(dir)
		}
	}
	include := formats.AllIncludes()
	if d.c.Include != nil {
		include = d.c.Include
	}
	for _, p := range []*string{&v.data, &v.test} {
		if !s3.IsURL(*p) {
			continue
		}
		src := d.source
		if p == &v.test || src == nil {
			var err error
			if src, err = s3.New(ctx, *p, d.s3Config(log)); err != nil {
				cleanup()
				return nil, err
			}
		}
		if p == &v.data {
			d.source = src
		}
		dir, err := os.MkdirTemp("", "corgifs-validate-s3-")
		if err != nil {
			cleanup()
			return nil, err
		}
		dirs = append(dirs, dir)
		if err := copyObjects(ctx, src, include, dir); err != nil {
			cleanup()
			return nil, err
		}
		log.Info("copied the data objects for the whole-file reads (the epochs read the bucket)", "source", *p, "to", dir)
		if p == &v.data {
			d.copied = dir
		} else {
			*p = dir
		}
	}
	return cleanup, nil
}

// copyObjects copies the objects of src whose base names match include
// into dir, 8 MiB a GET.
func copyObjects(ctx context.Context, src source.Source, include []string, dir string) error {
	objs, err := src.List(ctx, func(base string) bool {
		return slices.ContainsFunc(include, func(p string) bool { ok, _ := path.Match(p, base); return ok })
	})
	if err != nil {
		return err
	}
	buf := make([]byte, 8<<20)
	for _, o := range objs {
		if err := ctx.Err(); err != nil {
			return err
		}
		to := filepath.Join(dir, filepath.FromSlash(o.Path))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := copyObject(src, o, to, buf); err != nil {
			return err
		}
	}
	return nil
}

func copyObject(src source.Source, o source.Object, to string, buf []byte) error {
	r, err := src.Open(o.Path, o.Version)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.Create(to)
	if err != nil {
		return err
	}
	for off := int64(0); off < o.Size; {
		n := min(int64(len(buf)), o.Size-off)
		if _, err := r.ReadAt(buf[:n], off); err != nil {
			w.Close()
			return err
		}
		if _, err := w.Write(buf[:n]); err != nil {
			w.Close()
			return fmt.Errorf("copy %s to %s: %w", r.Name(), to, err)
		}
		off += n
	}
	return w.Close()
}

func (d *datasetFlags) s3Config(log *slog.Logger) s3.Config {
	c := d.c.S3
	c.Logger = log
	return c
}

// openSource makes the S3 source of src when it is an s3:// URL, checking
// that the endpoint, the credentials and the bucket are good
// (mount.OpenSource), for tune, which reads the source without indexing it.
func (d *datasetFlags) openSource(ctx context.Context, src string, log *slog.Logger) error {
	if !s3.IsURL(src) || d.source != nil {
		return nil
	}
	s, err := mount.OpenSource(ctx, d.config(src), log)
	if err != nil {
		return err
	}
	d.source = s
	return nil
}
