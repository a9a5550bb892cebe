package zaccess

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
)

// The inflater against the standard library's and klauspost's on the same
// gzip stream (output bytes per second).
func benchData(b *testing.B) ([]byte, int64) {
	data := sample(16<<20, 9)
	var c bytes.Buffer
	w, _ := gzip.NewWriterLevel(&c, 6)
	w.Write(data)
	w.Close()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	return c.Bytes(), int64(len(data))
}

func BenchmarkInflate(b *testing.B) {
	comp, _ := benchData(b)
	for b.Loop() {
		if _, err := Build(bytes.NewReader(comp), int64(len(comp)), Gzip, 8<<20, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInflateStdlib(b *testing.B) {
	comp, _ := benchData(b)
	for b.Loop() {
		r, _ := gzip.NewReader(bytes.NewReader(comp))
		io.Copy(io.Discard, r)
	}
}

func BenchmarkInflateKlauspost(b *testing.B) {
	comp, _ := benchData(b)
	for b.Loop() {
		r, _ := kgzip.NewReader(bytes.NewReader(comp))
		io.Copy(io.Discard, r)
	}
}

// BenchmarkInflateFile inflates the gzip file $ZACCESS_BENCH_FILE, to
// compare with zcat of the same file.
func BenchmarkInflateFile(b *testing.B) {
	name := os.Getenv("ZACCESS_BENCH_FILE")
	if name == "" {
		b.Skip("set ZACCESS_BENCH_FILE to a gzip file")
	}
	comp, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ix, err := Build(bytes.NewReader(comp), int64(len(comp)), Gzip, 8<<20, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(ix.Size)
	}
}
