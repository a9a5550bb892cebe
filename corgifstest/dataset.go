package corgifstest

import (
	"archive/tar"
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/formats"
)

// A DatasetOption sets up WriteDataset.
type DatasetOption func(*dataset)

type dataset struct {
	format string
	files  int
	size   int
}

// Format sets the format of the files WriteDataset writes: "tfrecord"
// (the default), "lines", "jsonl", "csv", "libsvm", "wds" or "npy".
func Format(name string) DatasetOption { return func(d *dataset) { d.format = name } }

// Files sets the number of files the records are spread over, in order
// (default 1).
func Files(n int) DatasetOption { return func(d *dataset) { d.files = n } }

// RecordBytes sets the size of each record's payload (default 64, at least
// 12): the TFRecord payload, the text of a line, the row of a .npy file.
func RecordBytes(n int) DatasetOption { return func(d *dataset) { d.size = n } }

// encoders write the files of a format; every record's payload names its
// number, so that every record is distinct.
var encoders = map[string]struct {
	ext string
	// write writes records [from, to) as one file.
	write func(w io.Writer, from, to, size int) error
}{
	"tfrecord": {".tfrecord", func(w io.Writer, from, to, size int) error {
		tw := formats.NewWriter(w)
		for k := from; k < to; k++ {
			if err := tw.Write(payload(k, size)); err != nil {
				return err
			}
		}
		return nil
	}},
	"lines": {".txt", lineWriter(func(k, size int) string { return string(payload(k, size)) })},
	"jsonl": {".jsonl", lineWriter(func(k, size int) string {
		return fmt.Sprintf(`{"id": %d, "text": %q}`, k, payload(k, size))
	})},
	"csv": {".csv", func(w io.Writer, from, to, size int) error {
		if _, err := io.WriteString(w, "id,label,text\n"); err != nil {
			return err
		}
		return lineWriter(func(k, size int) string { return fmt.Sprintf("%d,%d,%s", k, k%2, payload(k, size)) })(w, from, to, size)
	}},
	"libsvm": {".libsvm", lineWriter(func(k, _ int) string { return fmt.Sprintf("%d 1:%d 2:0.5", k%2, k+1) })},
	"wds": {".tar", func(w io.Writer, from, to, size int) error {
		tw := tar.NewWriter(w)
		for k := from; k < to; k++ {
			key := fmt.Sprintf("sample%08d", k)
			for _, m := range []struct {
				ext  string
				data []byte
			}{{".txt", payload(k, size)}, {".cls", fmt.Appendf(nil, "%d", k%2)}} {
				h := &tar.Header{Name: key + m.ext, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if _, err := tw.Write(m.data); err != nil {
					return err
				}
			}
		}
		return tw.Close()
	}},
	"npy": {".npy", func(w io.Writer, from, to, size int) error {
		// A uint8 array of one row per record, written from the .npy
		// spec (version 1.0) rather than by the formats package.
		dict := fmt.Sprintf("{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }", to-from, size)
		hlen := (10+len(dict)+1+63)/64*64 - 10
		h := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
		binary.LittleEndian.PutUint16(h[8:], uint16(hlen))
		h = append(h, dict...)
		h = append(h, strings.Repeat(" ", hlen-len(dict)-1)...)
		h = append(h, '\n')
		if _, err := w.Write(h); err != nil {
			return err
		}
		for k := from; k < to; k++ {
			if _, err := w.Write(payload(k, size)); err != nil {
				return err
			}
		}
		return nil
	}},
}

// DatasetFormats lists the formats WriteDataset writes.
func DatasetFormats() []string {
	var names []string
	for n := range encoders {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func lineWriter(line func(k, size int) string) func(w io.Writer, from, to, size int) error {
	return func(w io.Writer, from, to, size int) error {
		for k := from; k < to; k++ {
			if _, err := io.WriteString(w, line(k, size)+"\n"); err != nil {
				return err
			}
		}
		return nil
	}
}

// payload is record k's content: its number, then letters drawn from it.
func payload(k, size int) []byte {
	b := fmt.Appendf(make([]byte, 0, size), "rec%08d-", k)
	x := uint32(k)*2654435761 + 1
	for len(b) < size {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b = append(b, 'a'+byte(x%26))
	}
	return b[:max(size, 12)]
}

// WriteDataset writes n records into files in dir (created if missing)
// and returns them in file order, each as the format's streaming reader,
// and so Daemon.Records, gives it: a whole TFRecord frame, a line with its
// line end, a whole tar sample. Record k's payload starts with "rec"
// and k in 8 digits, so that every record is distinct. The test fails on
// an unknown format or a write error.
func WriteDataset(tb testing.TB, dir string, n int, opts ...DatasetOption) [][]byte {
	tb.Helper()
	d := dataset{format: "tfrecord", files: 1, size: 64}
	for _, o := range opts {
		o(&d)
	}
	enc, ok := encoders[d.format]
	if !ok {
		tb.Fatalf("corgifstest: WriteDataset: no writer for format %q; it writes %s", d.format, strings.Join(DatasetFormats(), ", "))
	}
	if n < 0 || d.files < 1 || d.files > max(n, 1) {
		tb.Fatalf("corgifstest: WriteDataset: %d records in %d files", n, d.files)
	}
	d.size = max(d.size, 12)
	f, err := formats.Lookup(d.format, formats.Options{})
	if err != nil {
		tb.Fatalf("corgifstest: WriteDataset: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	var recs [][]byte
	for j := range d.files {
		name := filepath.Join(dir, fmt.Sprintf("data-%05d%s", j, enc.ext))
		if err := writeFile(name, func(w io.Writer) error { return enc.write(w, j*n/d.files, (j+1)*n/d.files, d.size) }); err != nil {
			tb.Fatalf("corgifstest: WriteDataset: %s: %v", name, err)
		}
		file, err := os.Open(name)
		if err != nil {
			tb.Fatal(err)
		}
		got, err := readRecords(f, bufio.NewReader(file))
		file.Close()
		if err != nil {
			tb.Fatalf("corgifstest: WriteDataset: reading back %s: %v", name, err)
		}
		recs = append(recs, got...)
	}
	if len(recs) != n {
		tb.Fatalf("corgifstest: WriteDataset: wrote %d records, read back %d", n, len(recs))
	}
	return recs
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
