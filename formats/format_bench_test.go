package formats

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkScan measures the CPU cost of indexing each format from
// memory, about 1 KiB records (b.SetBytes: MB/s is index speed without
// I/O).
func BenchmarkScan(b *testing.B) {
	const n = 16 << 10 // records
	payload := bytes.Repeat([]byte("0.125,"), 170)
	var tf, lines, csvData, svm, js []byte
	csvData = []byte("a,b\n")
	for i := range n {
		tf = AppendFrame(tf, payload)
		lines = fmt.Appendf(append(lines, payload...), "%d\n", i)
		csvData = fmt.Appendf(csvData, "%d,\"%s\"\n", i, payload)
		js = fmt.Appendf(js, "{\"i\": %d, \"x\": \"%s\"}\n", i, payload)
		svm = fmt.Appendf(svm, "1")
		for k := 1; k <= 100; k++ {
			svm = fmt.Appendf(svm, " %d:0.%03d", k, i%1000)
		}
		svm = append(svm, '\n')
	}
	npy := npyFile(fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 256), }", n), make([]byte, n*1024))
	var ms []member
	for i := range n / 2 {
		ms = append(ms, member{name: fmt.Sprintf("s%06d.cls", i), data: "1"}, member{name: fmt.Sprintf("s%06d.bin", i), data: string(payload)})
	}
	wds := shard(b, 0, ms...)
	for _, c := range []struct {
		f    Format
		data []byte
	}{
		{TFRecord{}, tf}, {Lines{}, lines}, {JSONL{}, js}, {JSONL{Check: true}, js}, {CSV{Header: true}, csvData},
		{LibSVM{}, svm}, {NPY{}, npy}, {WDS{}, wds},
	} {
		name := c.f.Name()
		if j, ok := c.f.(JSONL); ok && j.Check {
			name += "-check"
		}
		b.Run(name, func(b *testing.B) {
			r := bytes.NewReader(c.data)
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				h, err := c.f.Head(r, int64(len(c.data)))
				if err != nil {
					b.Fatal(err)
				}
				sc := c.f.Scan(r, h, h.Start, h.End)
				for sc.Next() {
				}
				if sc.Err() != nil {
					b.Fatal(sc.Err())
				}
			}
		})
		b.Run(name+"-split", func(b *testing.B) {
			r := bytes.NewReader(c.data)
			h, _ := c.f.Head(r, int64(len(c.data)))
			first := h.Start
			if sc := c.f.Scan(r, h, h.Start, h.End); sc.Next() {
				first = sc.Record().Offset
			}
			end := h.End
			if c.f.Name() == "wds" {
				end -= 2 * tarBlock
			}
			buf := append(bytes.Clone(c.data[first:end]), h.Tail...)
			starts := make([]int64, 0, n)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				var err error
				if starts, _, err = c.f.SplitFilled(h, buf, int64(len(buf)), 0, first, starts[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
