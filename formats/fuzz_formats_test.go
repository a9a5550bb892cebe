package formats

import (
	"archive/tar"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// formatSeeds are the seed inputs of the fuzz targets of the formats
// other than TFRecord; testdata/fuzz holds the same inputs as a corpus
// (CORGIFS_WRITE_SEEDS=1 go test -run TestCommittedFuzzCorpusHoldsTheSeeds rewrites it).
func formatSeeds(t testing.TB) map[string]map[string][]byte {
	wds := wdsShards(t)
	good := shard(t, 0, member{name: "a.cls", data: "1"}, member{name: "a.bin", data: "xx"}, member{name: "b.cls", data: "2"})
	flip := bytes.Clone(good)
	flip[1024+3] ^= 1
	row := npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", make([]byte, 24))
	return map[string]map[string][]byte{
		"FuzzLines": {
			"empty":      nil,
			"lf-crlf":    []byte("one\ntwo\r\n\nthree"),
			"json":       []byte("{\"a\": 1}\n[1, 2]\r\n\"s\"\n3"),
			"json-bad":   []byte("{\"a\": 1}\n{\"b\": \n{}\n"),
			"libsvm":     []byte("1 1:0.5 3:2\n-1 qid:3 2:1e-3 10:-4 # comment\r\n+1\n0,2 4:inf\n"),
			"libsvm-bad": []byte("1 2:1 1:1\n1 a:b\n"),
		},
		"FuzzCSV": {
			"empty":      nil,
			"quoted":     []byte("id,text\n1,plain\n2,\"two\nlines\"\r\n3,\"a \"\"quote\"\", and, commas\"\n4,\"\"\n"),
			"crlf":       []byte("id,text\r\n5,\"\n\"\n6,last without newline"),
			"bare-quote": []byte("a,b\n1,x\"y\n"),
			"unclosed":   []byte("a,b\n1,\"open\n"),
			"fields":     []byte("a,b\n1,2,3\n"),
			"probe":      []byte("a,b\n\"x,\",\"\n\"\n\"\",\"\"\"\"\n,\"\r\n,\"\r\n\"\"\"\n,\n\",y\n"),
		},
		"FuzzNPY": {
			"rows":     row,
			"short":    row[:len(row)-1],
			"fortran":  npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }", make([]byte, 48)),
			"1d":       npyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", []byte("abcde")),
			"not-npy":  []byte("PK\x03\x04"),
			"no-magic": []byte("\x93NUMPY\x02\x00\xff\xff\xff\xff"),
		},
		"FuzzWDS": {
			"empty":     wds[2],
			"padded":    wds[1],
			"long-name": wds[0],
			"good":      good,
			"checksum":  flip,
			"truncated": good[:2048],
		},
	}
}

func addSeeds(f *testing.F, name string) {
	seeds := formatSeeds(f)[name]
	for _, k := range slices.Sorted(maps.Keys(seeds)) {
		f.Add(seeds[k])
	}
}

// TestCommittedFuzzCorpusHoldsTheSeeds checks that testdata/fuzz holds
// every seed of formatSeeds, so that CI's fuzzing starts from them;
// CORGIFS_WRITE_SEEDS=1 rewrites the corpus instead.
func TestCommittedFuzzCorpusHoldsTheSeeds(t *testing.T) {
	write := os.Getenv("CORGIFS_WRITE_SEEDS") != ""
	for target, seeds := range formatSeeds(t) {
		dir := filepath.Join("testdata", "fuzz", target)
		if write {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for name, b := range seeds {
			path := filepath.Join(dir, name)
			s := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if write {
				if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != s {
				t.Errorf("%s is not the seed formatSeeds makes (err %v): run CORGIFS_WRITE_SEEDS=1 go test -run TestCommittedFuzzCorpusHoldsTheSeeds ./formats", path, err)
			}
		}
	}
}

// fuzzFormat checks the properties every format keeps on any input: no
// panic; the records found tile the file from Head.Start; and when the
// scan succeeds, SplitFilled on the block of all records and the reader
// on the file find the same records. It returns the scan's result.
func fuzzFormat(t *testing.T, f Format, data []byte) (fileRecords, error) {
	s, err := scanFile(f, data)
	off := s.head.Start
	if len(s.recs) > 0 && f.Name() == "wds" {
		off = s.recs[0].Offset // members before the first sample are not served
	}
	for i, r := range s.recs {
		if r.Offset != off || r.Len <= 0 || r.Offset+r.Len > int64(len(data)) {
			t.Fatalf("record %d is %+v, want it to start at %d", i, r, off)
		}
		off += r.Len
	}
	if err != nil {
		return s, err
	}
	if len(s.recs) > 0 {
		buf := s.block(data, 0, len(s.recs))
		first := s.recs[0].Offset
		starts, next, err := f.SplitFilled(s.head, buf, int64(len(buf)), 0, first, nil)
		if err != nil || len(starts) != len(s.recs) || next != int64(len(buf)) {
			t.Fatalf("split of the scanned records: %d starts ending at %d, %v; want %d", len(starts), next, err, len(s.recs))
		}
		for i, st := range starts {
			if st != s.recs[i].Offset-first {
				t.Fatalf("split start %d is %d, want %d", i, st, s.recs[i].Offset-first)
			}
		}
		// Fed in pieces, the split finds the same. A record that is not
		// whole yet is looked at again at every call, so the pieces grow
		// with the input, as the loader's reads do.
		var got []int64
		from := int64(0)
		for filled := int64(0); filled <= int64(len(buf)); filled += max(13, int64(len(buf))/16) {
			if got, from, err = f.SplitFilled(s.head, buf, filled, from, 0, got); err != nil {
				t.Fatalf("split filled to %d: %v", filled, err)
			}
		}
		if got, _, err = f.SplitFilled(s.head, buf, int64(len(buf)), from, 0, got); err != nil || !slices.Equal(got, starts) {
			t.Fatalf("split in pieces: %v, %v; whole: %v", got, err, starts)
		}
	}
	rd := f.NewReader(bytes.NewReader(data))
	for i := range s.recs {
		got, err := rd.Next()
		if err != nil || !bytes.Equal(got, s.served(data, i)) {
			t.Fatalf("reader record %d: %q, %v; scanner: %q", i, got, err, s.served(data, i))
		}
	}
	if got, err := rd.Next(); err != io.EOF {
		t.Fatalf("reader after the last record: %q, %v", got, err)
	}
	return s, nil
}

func FuzzLines(f *testing.F) {
	addSeeds(f, "FuzzLines")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := fuzzFormat(t, Lines{}, data)
		if err != nil {
			t.Fatalf("lines refused %q: %v", data, err)
		}
		if n := bytes.Count(data, []byte{'\n'}); len(s.recs) != n+len(s.head.Tail) {
			t.Fatalf("%d lines for %d line ends and tail %q", len(s.recs), n, s.head.Tail)
		}
		if _, err := fuzzFormat(t, JSONL{Check: true}, data); err == nil {
			for l := range bytes.Lines(data) {
				if !json.Valid(l) {
					t.Fatalf("jsonl accepted %q", l)
				}
			}
		}
		fuzzFormat(t, LibSVM{}, data)
	})
}

func FuzzCSV(f *testing.F) {
	addSeeds(f, "FuzzCSV")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, header := range []bool{true, false} {
			s, err := fuzzFormat(t, CSV{Header: header}, data)
			if err != nil {
				continue
			}
			// encoding/csv, the independent reader, reads what the
			// scanner accepted, row for row.
			rows, cerr := csv.NewReader(bytes.NewReader(data)).ReadAll()
			want := len(s.recs)
			if header && s.head.Key != nil {
				want++
			}
			if cerr != nil || len(rows) != want {
				t.Fatalf("header %v: scanner found %d rows in %q, encoding/csv %d: %v", header, want, data, len(rows), cerr)
			}
			// A probe near any offset cuts at a row start the scan
			// found, or gives up.
			checkCSVProbe(t, data, s, 1+int64(len(data))/128)
		}
	})
}

func FuzzNPY(f *testing.F) {
	addSeeds(f, "FuzzNPY")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := fuzzFormat(t, NPY{}, data)
		if err != nil {
			return
		}
		// A part of its rows has a header that reads back the same.
		p := NPY{}.AppendPrologue(nil, s.head, int64(len(s.recs)))
		for i := range s.recs {
			p = append(p, s.served(data, i)...)
		}
		ps, err := fuzzFormat(t, NPY{}, p)
		if err != nil || !bytes.Equal(ps.head.Key, s.head.Key) || len(ps.recs) != len(s.recs) || len(p)%64 != int(ps.head.End-ps.head.Start)%64 {
			t.Fatalf("part of %q: %v, key %q, %d rows", data, err, ps.head.Key, len(ps.recs))
		}
	})
}

func FuzzWDS(f *testing.F) {
	addSeeds(f, "FuzzWDS")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := fuzzFormat(t, WDS{}, data)
		if err != nil {
			return
		}
		// Where archive/tar reads the shard too, it finds the same
		// samples, and a part of them is a tar it reads.
		samples, terr := tarSampleCount(data)
		if terr == nil && samples != len(s.recs) {
			t.Fatalf("%d samples, archive/tar finds %d", len(s.recs), samples)
		}
		p := s.block(data, 0, len(s.recs))
		p = WDS{}.AppendEpilogue(p, s.head)
		if n, err := tarSampleCount(p); terr == nil && (err != nil || n != samples) {
			t.Fatalf("part: %d samples, %v; want %d", n, err, samples)
		}
	})
}

// tarSampleCount counts the samples archive/tar and wdsRE find.
func tarSampleCount(data []byte) (int, error) {
	r := tar.NewReader(bytes.NewReader(data))
	n, key := 0, ""
	for {
		h, err := r.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		m := wdsRE.FindStringSubmatch(h.Name)
		if m == nil || !slices.Contains([]byte{tar.TypeReg, 0, tar.TypeCont}, h.Typeflag) || (!strings.Contains(h.Name, "/") && strings.HasPrefix(h.Name, "__") && strings.HasSuffix(h.Name, "__")) {
			continue
		}
		if m[1] != key {
			n, key = n+1, m[1]
		}
	}
}
