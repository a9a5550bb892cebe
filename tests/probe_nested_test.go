package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tfFrame is one TFRecord frame of data.
func tfFrame(data []byte) []byte {
	var h [12]byte
	n := uint64(len(data))
	for i := range 8 {
		h[i] = byte(n >> (8 * i))
	}
	c := maskedCRC32C(h[:8])
	h[8], h[9], h[10], h[11] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
	out := append(h[:], data...)
	c = maskedCRC32C(data)
	return append(out, byte(c), byte(c>>8), byte(c>>16), byte(c>>24))
}

// tarOf writes members (name, data) as a tar archive.
func tarOf(t *testing.T, members ...[2]string) []byte {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, m := range members {
		if err := w.WriteHeader(&tar.Header{Name: m[0], Mode: 0o644, Size: int64(len(m[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(m[1]))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// nestedSet is a dataset of one file whose payloads embed valid streams
// of its own format (an archive of shards), and how to split a served
// part or the source file into records.
type nestedSet struct {
	name    string
	file    string
	data    []byte
	records func(t *testing.T, b []byte) [][32]byte
	fooled  bool // the probe is fooled (TFRecord, tar); line formats probe exactly
}

func nestedSets(t *testing.T) []nestedSet {
	var tf, jl []byte
	var members [][2]string
	for i := range 90 {
		// One record in three is a shard of its own, larger than a block.
		if i%3 == 1 {
			var inner []byte
			var innerTar [][2]string
			innerJL := ""
			for k := range 40 {
				rec := fmt.Sprintf("inner %d.%d %s", i, k, strings.Repeat("i", 40+k))
				inner = append(inner, tfFrame([]byte(rec))...)
				innerTar = append(innerTar, [2]string{fmt.Sprintf("in%d_%03d.txt", i, k), rec})
				s, _ := json.Marshal(map[string]string{"inner": rec})
				innerJL += string(s) + "\n"
			}
			tf = append(tf, tfFrame(inner)...)
			members = append(members, [2]string{fmt.Sprintf("s%04d.cls", i), "1"}, [2]string{fmt.Sprintf("s%04d.tar", i), string(tarOf(t, innerTar...))})
			s, _ := json.Marshal(map[string]any{"i": i, "shard": innerJL})
			jl = append(append(jl, s...), '\n')
			continue
		}
		rec := fmt.Sprintf("outer %d %s", i, strings.Repeat("o", 100+i))
		tf = append(tf, tfFrame([]byte(rec))...)
		members = append(members, [2]string{fmt.Sprintf("s%04d.cls", i), "0"}, [2]string{fmt.Sprintf("s%04d.txt", i), rec})
		s, _ := json.Marshal(map[string]any{"i": i, "text": rec})
		jl = append(append(jl, s...), '\n')
	}
	return []nestedSet{
		{name: "tfrecord", file: "shards.tfrecord", data: tf, fooled: true, records: func(t *testing.T, b []byte) [][32]byte { return hashes(frames(t, b)) }},
		{name: "wds", file: "shards.tar", data: tarOf(t, members...), fooled: true, records: tarSamples},
		{name: "jsonl", file: "shards.jsonl", data: jl, records: func(t *testing.T, b []byte) [][32]byte {
			lines := bytes.SplitAfter(b, []byte("\n"))
			return hashes(lines[:len(lines)-1]) // after the last line end: nothing
		}},
	}
}

// tarSamples splits a tar into WebDataset samples (consecutive members of
// one key), each hashed over its members' names and data.
func tarSamples(t *testing.T, b []byte) [][32]byte {
	tr := tar.NewReader(bytes.NewReader(b))
	var out [][32]byte
	var key string
	var cur []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("served tar: %v", err)
		}
		data, _ := io.ReadAll(tr)
		base := path.Base(h.Name)
		k := h.Name[:len(h.Name)-len(base)] + base[:strings.IndexByte(base, '.')]
		if k != key && cur != nil {
			out = append(out, sha256.Sum256(cur))
			cur = nil
		}
		key = k
		cur = append(append(append(cur, h.Name...), 0), data...)
	}
	if cur != nil {
		out = append(out, sha256.Sum256(cur))
	}
	return out
}

// A file whose record payloads are themselves streams of its format (a
// TFRecord of TFRecord shards, a tar of tar shards, a JSONL of escaped
// JSONL), mounted with --index probe and blocks smaller than a record:
// every part read either fails with EIO or holds only records of the
// source, and an epoch read whole holds each exactly once; the probe of
// TFRecord and tar is fooled and the loads that meet it say so. The next
// mount with the same cache directory scans that file whole (the log
// names it) and serves, byte for byte, the parts of a mount indexed in
// full. JSONL's probe is exact: the first probed mount already serves the
// full mount's bytes.
func TestNestedStreamsUnderAProbedIndexServeOnlySourceRecordsThenExactEpochs(t *testing.T) {
	for _, s := range nestedSets(t) {
		t.Run(s.name, func(t *testing.T) {
			src := s.write(t)
			checkNestedProbe(t, s, src, src)
		})
	}
}

// The same through a real S3 server, where --index probe is the default
// (the case of the issue): a TFRecord object of TFRecord shards.
func TestNestedTFRecordObjectInS3ServesOnlySourceRecordsThenExactEpochs(t *testing.T) {
	s := nestedSets(t)[0]
	srv := startS3(t)
	src := s.write(t)
	srv.upload("data", "nested", src)
	checkNestedProbe(t, s, src, "s3://data/nested", "--s3-endpoint", srv.endpoint)
}

// write writes the set's file into a new source directory.
func (s nestedSet) write(t *testing.T) string {
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, s.file), s.data, 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

// checkNestedProbe mounts probedSrc (src, or its copy in S3) with
// --index probe twice with one cache directory and src with --index full,
// and checks what the test above says.
func checkNestedProbe(t *testing.T, s nestedSet, src, probedSrc string, remote ...string) {
	want := sortedHashes(s.records(t, s.data))
	inSource := map[[32]byte]bool{}
	for _, h := range want {
		inSource[h] = true
	}
	flags := []string{"--seed", "5", "--block-size", "2KiB"}
	full := startMount(t, src, append(flags, "--index", "full")...)
	fullParts := readAll(t, full)

	cache := t.TempDir()
	probed := startMount(t, probedSrc, append(append(flags, "--index", "probe", "--cache-dir", cache), remote...)...)
	eio := 0
	for epoch := range 2 {
		for _, k := range []int{1, 3} {
			var epochRecs [][32]byte
			whole := true
			for i := range k {
				b, err := os.ReadFile(probed.part(epoch, i, k))
				if err != nil {
					if !errors.Is(err, syscall.EIO) {
						t.Fatalf("epoch %d part %d/%d: %v, want EIO or the bytes", epoch, i, k, err)
					}
					eio++
					whole = false
					continue
				}
				for _, h := range s.records(t, b) {
					if !inSource[h] {
						t.Fatalf("epoch %d part %d/%d served a record that is not in the source", epoch, i, k)
					}
					epochRecs = append(epochRecs, h)
				}
			}
			if whole && !slices.Equal(sortedHashes(epochRecs), want) {
				t.Fatalf("epoch %d, K=%d: %d records served, the source has %d (not each exactly once)", epoch, k, len(epochRecs), len(want))
			}
		}
	}
	if !s.fooled {
		if eio != 0 {
			t.Fatalf("%d parts failed: the %s probe is exact", eio, s.name)
		}
		for key, b := range readAll(t, probed) {
			if !bytes.Equal(b, fullParts[key]) {
				t.Fatalf("part %s of the probed mount differs from the full mount's", key)
			}
		}
		return
	}
	if eio == 0 {
		t.Fatal("no part failed: the probe was not fooled, the test no longer builds its case")
	}
	if !probed.waitLog(regexp.MustCompile(`next mount rebuilds the index, scanning this file whole.*`+regexp.QuoteMeta(s.file)), 10*time.Second) {
		t.Fatalf("no log line says the next mount scans %s whole:\n%s", s.file, probed.log)
	}
	probed.stop()

	again := startMount(t, probedSrc, append(append(flags, "--index", "probe", "--cache-dir", cache), remote...)...)
	if !strings.Contains(again.log.String(), "a load proved the probe of this file wrong") {
		t.Fatalf("the second mount does not say it scans the file whole:\n%s", again.log)
	}
	for key, b := range readAll(t, again) {
		if !bytes.Equal(b, fullParts[key]) {
			t.Fatalf("part %s (epoch/part/K) of the remount: %d bytes differ from the full mount's %d", key, len(b), len(fullParts[key]))
		}
	}
}
