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
	var tf, lines, csvData, csvPlain, svm, js []byte
	csvData = []byte("a,b\n")
	// Rows of numbers as `corgifs gen synthetic --format csv` writes them:
	// no quotes.
	csvPlain = []byte("id,f0,f1,f2,f3,f4,f5,f6,f7,f8,f9,f10,f11,f12,f13,f14,f15,f16,f17,f18,f19,f20,f21,f22,f23,f24,f25,f26,f27,f28,f29,f30,f31,f32,f33,f34,f35,f36,f37,f38,f39,f40,f41,f42,f43,f44,f45,f46,f47,f48,f49,f50,f51,f52,f53,f54,f55,f56,f57,f58,f59,f60,f61,f62,f63,f64,f65,f66,f67,f68,f69,f70,f71,f72,f73,f74,f75,f76,f77,f78,f79,f80,f81,f82,f83,f84,f85,f86,f87,f88,f89,f90,f91,f92,f93,f94,f95,f96,f97,f98,f99,f100,f101,f102,f103,f104,f105,f106,f107,f108,f109,f110,f111,f112,f113,f114,f115,f116,f117,f118,f119,f120,f121,f122,f123,f124,f125,f126,f127,f128,f129,f130,f131,f132,f133,f134,f135,f136,f137,f138,f139,f140,f141,f142,f143,f144,f145,f146,f147,f148,f149,f150,f151,f152,f153,f154,f155,f156,f157,f158,f159,f160,f161,f162,f163,f164,f165,f166,f167,f168,f169\n")
	for i := range n {
		tf = AppendFrame(tf, payload)
		lines = fmt.Appendf(append(lines, payload...), "%d\n", i)
		csvData = fmt.Appendf(csvData, "%d,\"%s\"\n", i, payload)
		csvPlain = fmt.Appendf(csvPlain, "%d,%s\n", i, payload[:len(payload)-1])
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
		name string // if not the format's
	}{
		{TFRecord{}, tf, ""}, {Lines{}, lines, ""}, {JSONL{}, js, ""}, {JSONL{Check: true}, js, "jsonl-check"},
		{CSV{Header: true}, csvData, ""}, {CSV{Header: true}, csvPlain, "csv-plain"},
		{LibSVM{}, svm, ""}, {NPY{}, npy, ""}, {WDS{}, wds, ""},
	} {
		name := c.name
		if name == "" {
			name = c.f.Name()
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
