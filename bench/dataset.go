//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/corgifs/corgifs/datagen"
	"github.com/dustin/go-humanize"
)

// Dataset shape: label-clustered, the worst case for a sequential reader,
// in 16 files.
const (
	dataFiles   = 16
	dataClasses = 4
	dataSeed    = 1
)

// dataset is the synthetic dataset the benchmark reads.
type dataset struct {
	Synthetic datagen.Synthetic `json:"synthetic"`
	Size      int64             `json:"requested_size"` // --size
	Bytes     int64             `json:"bytes"`          // actual total size
	Files     []string          `json:"files"`          // base names, in order

	dir string
}

// paths returns the paths of the dataset's files.
func (d *dataset) paths() []string {
	p := make([]string, len(d.Files))
	for i, f := range d.Files {
		p[i] = filepath.Join(d.dir, f)
	}
	return p
}

// ensureDataset writes the dataset into work/src, or reuses the one there if
// work/dataset.json says it was made with the same size and features and its
// files are intact.
func ensureDataset(ctx context.Context, work string, size int64, features int, log io.Writer) (*dataset, error) {
	dir := filepath.Join(work, "src")
	meta := filepath.Join(work, "dataset.json")
	if d, err := loadDataset(meta, dir); err == nil && d.Size == size && d.Synthetic.Features == features {
		fmt.Fprintf(log, "reusing the dataset in %s (%s, %d records)\n", dir, humanize.IBytes(uint64(d.Bytes)), d.Synthetic.Records)
		return d, nil
	}
	if _, err := os.Stat(meta); err == nil {
		os.RemoveAll(dir) // an older dataset of ours
	} else if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("%s exists but is no dataset of this benchmark (no %s): choose another --work", dir, meta)
	}

	// A small sample gives the size of a record; records vary by a few bytes
	// (varint ids), so the dataset comes out within a fraction of a percent.
	sample := datagen.Synthetic{Records: 1000, Features: features, Classes: dataClasses, Clustered: true, Files: 1, Seed: dataSeed}
	sdir := filepath.Join(work, "sample")
	sum, err := sample.Write(ctx, sdir, nil)
	os.RemoveAll(sdir)
	if err != nil {
		return nil, err
	}
	records := int(float64(size) * float64(sample.Records) / float64(sum.Bytes))
	s := datagen.Synthetic{Records: max(records, dataFiles), Features: features, Classes: dataClasses,
		Clustered: true, Files: dataFiles, Seed: dataSeed}

	fmt.Fprintf(log, "writing %d records of %d features (%s) into %s\n", s.Records, features, humanize.IBytes(uint64(size)), dir)
	start, last := time.Now(), time.Now()
	sum, err = s.Write(ctx, dir, func(n int64) {
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(log, "  %s written\n", humanize.IBytes(uint64(n)))
		}
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "wrote %s in %s\n", humanize.IBytes(uint64(sum.Bytes)), time.Since(start).Round(time.Second))
	d := &dataset{Synthetic: s, Size: size, Bytes: sum.Bytes, dir: dir}
	for _, f := range sum.Files {
		d.Files = append(d.Files, filepath.Base(f))
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return d, os.WriteFile(meta, append(b, '\n'), 0o644)
}

// loadDataset reads a dataset.json and checks that the files it lists are
// there with the total size it records.
func loadDataset(meta, dir string) (*dataset, error) {
	b, err := os.ReadFile(meta)
	if err != nil {
		return nil, err
	}
	d := &dataset{dir: dir}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, err
	}
	var total int64
	for _, p := range d.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		total += fi.Size()
	}
	if total != d.Bytes || len(d.Files) != dataFiles || !d.Synthetic.Clustered {
		return nil, errors.New("dataset changed")
	}
	return d, nil
}

// parseSize parses a byte size such as 2GiB.
func parseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > 1<<50 {
		return 0, fmt.Errorf("want a size such as 2GiB")
	}
	return int64(n), nil
}

// formatSize formats a byte size exactly, in the largest binary unit that
// divides it: 2GiB, 1536MiB, 1000B.
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}
