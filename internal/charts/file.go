// Package charts draws the reports of validate and herding with gonum/plot
// into the file a user names, SVG or PNG by its extension. Only the
// corgifs-plot command imports it: gonum/plot and its fonts are most of a
// binary's size, and the daemon has no use for them.
package charts

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Canvas returns a w by h canvas that writes the format path's extension
// names, so that an unsupported name is refused before anything is drawn.
func Canvas(path string, w, h vg.Length) (vg.CanvasWriterTo, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		return vgsvg.New(w, h), nil
	case ".png":
		return vgimg.PngCanvas{Canvas: vgimg.New(w, h)}, nil
	default:
		return nil, fmt.Errorf("%s: unsupported extension %q, want .svg or .png", path, ext)
	}
}

// Write writes c to the file path, reporting an error of the close too:
// a full disk may only show there.
func Write(path string, c io.WriterTo) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := c.WriteTo(f); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
