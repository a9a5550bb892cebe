package validate

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/source"
	"github.com/corgifs/corgifs/source/s3"
)

// copyFromS3 opens the source of an s3:// Data, for the index and the
// epochs, which read the bucket, and copies its data objects into a
// temporary directory for what is read as whole local files: the
// format's detection, the libsvm dimension, ViaFiles and the loss on
// the whole training set. An s3:// Test is copied too.
func (v *validation) copyFromS3(ctx context.Context) error {
	v.data, v.test = v.Data, v.Test
	include := formats.AllIncludes()
	if v.Mount.Include != nil {
		include = v.Mount.Include
	}
	for _, p := range []*string{&v.data, &v.test} {
		if !s3.IsURL(*p) {
			continue
		}
		sc := v.Mount.S3
		sc.Logger = v.log
		src, err := s3.New(ctx, *p, sc)
		if err != nil {
			return err
		}
		if p == &v.data {
			v.src = src
		}
		dir, err := os.MkdirTemp("", "corgifs-validate-s3-")
		if err != nil {
			return err
		}
		v.copies = append(v.copies, dir)
		if err := copyObjects(ctx, src, include, dir); err != nil {
			return err
		}
		v.log.Info("copied the data objects for the whole-file reads (the epochs read the bucket)", "source", *p, "to", dir)
		*p = dir
	}
	return nil
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
