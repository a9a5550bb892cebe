package validate

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/corgifs/corgifs/source"
)

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
