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
	"strings"
	"time"
	"unicode"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
	"github.com/dustin/go-humanize"
)

// Dataset shape: label-clustered, the worst case for a sequential reader,
// in 16 files.
const (
	dataFiles   = 16
	dataClasses = 4
	dataSeed    = 1
)

// dataset is one synthetic dataset the benchmark reads.
type dataset struct {
	Synthetic    datagen.Synthetic `json:"synthetic"`
	Size         int64             `json:"requested_size"`        // --size
	RecordSize   int64             `json:"requested_record_size"` // one of --record-sizes
	Bytes        int64             `json:"bytes"`                 // actual total size
	Files        []string          `json:"files"`                 // base names, in order
	WriteSeconds float64           `json:"write_seconds"`         // time datagen took to write it

	dir    string // the files
	reused bool   // found in the work directory rather than written by this run
}

// paths returns the paths of the dataset's files.
func (d *dataset) paths() []string {
	p := make([]string, len(d.Files))
	for i, f := range d.Files {
		p[i] = filepath.Join(d.dir, f)
	}
	return p
}

// label names the dataset in the report by the record size asked for.
func (d *dataset) label() string { return recordsLabel(d.RecordSize) }

// recordsLabel is the label of the dataset of records of recordSize bytes:
// "1 KiB records".
func recordsLabel(recordSize int64) string {
	s := formatSize(recordSize)
	i := strings.IndexFunc(s, unicode.IsLetter)
	return s[:i] + " " + s[i:] + " records"
}

// recordBytes is the size of a datagen.Synthetic record with features float
// features and the given id, TFRecord framing included. datagen encodes a
// label, the features and the id; only the varints of the label and the id
// vary between records, and the labels (classes) all take one byte.
func recordBytes(features, id int) int64 {
	var b tfexample.Builder
	b.Int64(datagen.LabelFeature, 0)
	b.Float(datagen.ValueFeature, make([]float32, features)...)
	b.Int64(datagen.IDFeature, int64(id))
	return int64(len(b.AppendTo(nil)) + formats.FrameExtra)
}

// minRecordSize is the size of the smallest record datagen makes.
func minRecordSize() int64 { return recordBytes(1, 0) }

// shape returns the number of features that makes records closest to
// recordSize bytes, and the number of such records that makes about size
// bytes.
func shape(size, recordSize int64) (features, records int) {
	// A feature adds 4 bytes. The protobuf length prefixes grow by a byte
	// at a few sizes, so the estimate's neighbours may come closer.
	est := max(1, int((recordSize-minRecordSize())/4)+1)
	features = est
	for f := max(1, est-2); f <= est+2; f++ {
		if abs(recordBytes(f, 0)-recordSize) < abs(recordBytes(features, 0)-recordSize) {
			features = f
		}
	}
	// Ids grow by a byte at powers of 128: the size of the middle one's
	// record is the average to within a byte.
	records = int(size / recordBytes(features, 0))
	records = int(size / recordBytes(features, records/2))
	return features, max(records, dataFiles)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// ensureDataset writes the dataset of records of about recordSize bytes into
// dir/src, or reuses the one there if dir/dataset.json says it was made with
// the same parameters and its files are intact.
func ensureDataset(ctx context.Context, dir string, size, recordSize int64, log io.Writer) (*dataset, error) {
	src := filepath.Join(dir, "src")
	meta := filepath.Join(dir, "dataset.json")
	features, records := shape(size, recordSize)
	s := datagen.Synthetic{Records: records, Features: features, Classes: dataClasses,
		Clustered: true, Files: dataFiles, Seed: dataSeed}
	if d, err := loadDataset(meta, src); err == nil && d.Synthetic == s && d.Size == size && d.RecordSize == recordSize {
		fmt.Fprintf(log, "reusing the dataset in %s (%s, %d records of %d bytes)\n",
			src, humanize.IBytes(uint64(d.Bytes)), s.Records, d.Bytes/int64(s.Records))
		d.reused = true
		return d, nil
	}
	if _, err := os.Stat(meta); err == nil {
		os.RemoveAll(src) // an older dataset of ours
	} else if _, err := os.Stat(src); err == nil {
		return nil, fmt.Errorf("%s exists but is no dataset of this benchmark (no %s): choose another --work", src, meta)
	}

	fmt.Fprintf(log, "writing %d records of %d features (%d bytes each, asked %s) into %s\n",
		s.Records, features, recordBytes(features, records/2), formatSize(recordSize), src)
	start, last := time.Now(), time.Now()
	sum, err := s.Write(ctx, src, func(n int64) {
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(log, "  %s written\n", humanize.IBytes(uint64(n)))
		}
	})
	if err != nil {
		return nil, err
	}
	took := time.Since(start)
	fmt.Fprintf(log, "wrote %s (%d bytes per record) in %s\n",
		humanize.IBytes(uint64(sum.Bytes)), sum.Bytes/int64(s.Records), took.Round(100*time.Millisecond))
	d := &dataset{Synthetic: s, Size: size, RecordSize: recordSize, Bytes: sum.Bytes,
		WriteSeconds: took.Seconds(), dir: src}
	for _, f := range sum.Files {
		d.Files = append(d.Files, filepath.Base(f))
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return d, os.WriteFile(meta, append(b, '\n'), 0o644)
}

// records returns the number of records d was written with, checked against
// the count in the config.json c of a mount of it. A probed index, the
// default for s3://, learns a file's records only as its blocks load, so
// before an epoch c's count is null and the dataset's own is the one to use.
func (d *dataset) records(c api.Config) (int64, error) {
	n := int64(d.Synthetic.Records)
	if c.Dataset.Records != nil && *c.Dataset.Records != n {
		return 0, fmt.Errorf("the mount's config.json counts %d records, the dataset in %s was written with %d: remove it to have it written again",
			*c.Dataset.Records, d.dir, n)
	}
	return n, nil
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
