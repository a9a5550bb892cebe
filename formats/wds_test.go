package formats

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/internal/testenv"
)

// member is a tar member to write: a regular file unless typ says.
type member struct {
	name string
	data string
	typ  byte
	gnu  bool // written in GNU format: long names as 'L' headers
}

// shard writes members with archive/tar, the independent writer, and
// pads the archive with pad zero bytes after its end marker.
func shard(t testing.TB, pad int, ms ...member) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}
		if m.typ != 0 {
			h.Typeflag, h.Size = m.typ, 0
		}
		if m.typ == tar.TypeXGlobalHeader {
			h = &tar.Header{Typeflag: m.typ, PAXRecords: map[string]string{"comment": "global"}}
		}
		if m.gnu {
			h.Format = tar.FormatGNU
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, m.data); err != nil && h.Size > 0 {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return append(b.Bytes(), make([]byte, pad)...)
}

// wdsRE is WebDataset's base_plus_ext rule, the independent definition
// of a sample key.
var wdsRE = regexp.MustCompile(`^((?:.*/|)[^.]+)[.]([^/]*)$`)

// tarSamples reads an archive with archive/tar and groups its regular
// members into samples by wdsRE, checking that the members of every key
// are consecutive. Each sample is "name=data;..." in member order.
func tarSamples(t *testing.T, data []byte) []string {
	t.Helper()
	r := tar.NewReader(bytes.NewReader(data))
	var samples []string
	var key string
	seen := map[string]bool{}
	for {
		h, err := r.Next()
		if err == io.EOF {
			return samples
		}
		if err != nil {
			t.Fatalf("archive/tar: %v", err)
		}
		d, _ := io.ReadAll(r)
		m := wdsRE.FindStringSubmatch(h.Name)
		if h.Typeflag != tar.TypeReg || m == nil || (!strings.Contains(h.Name, "/") && strings.HasPrefix(h.Name, "__") && strings.HasSuffix(h.Name, "__")) {
			continue
		}
		if m[1] != key {
			if seen[m[1]] {
				t.Fatalf("archive/tar: members of key %q are not consecutive", m[1])
			}
			seen[m[1]] = true
			key = m[1]
			samples = append(samples, "")
		}
		samples[len(samples)-1] += h.Name + "=" + string(d) + ";"
	}
}

func wdsShards(t testing.TB) [][]byte {
	long := strings.Repeat("d", 90) + "/" + strings.Repeat("k", 120)
	return [][]byte{
		shard(t, 0,
			member{name: "train/", typ: tar.TypeDir},
			member{name: "train/s000.cls", data: "3"},
			member{name: "train/s000.bin", data: strings.Repeat("x", 700)},
			member{name: "train/s001.cls", data: "1"},
			member{name: "train/s001.input.bin", data: "abc"},
			member{name: "train/link", typ: tar.TypeSymlink},
			member{name: "prefix/" + strings.Repeat("p", 95) + "/s9.cls", data: "9"}, // ustar prefix
			member{name: long + ".cls", data: "7"},                                   // pax path
			member{name: long + ".bin", data: "long", gnu: true},                     // GNU 'L'
			member{name: "s002.cls", data: ""},
		),
		shard(t, 9216, member{name: "s003.cls", data: "0"}, member{name: "s003.bin", data: strings.Repeat("y", 512)}),
		shard(t, 0),
	}
}

func TestWDSSamplesAreRunsOfAKeyCopiedVerbatimAndPartsAreValidTars(t *testing.T) {
	shards := wdsShards(t)
	if !bytes.Contains(shards[0], []byte("././@LongLink")) || !bytes.Contains(shards[0], []byte("/PaxHeader")) {
		t.Fatal("the shard has no GNU long name or no pax header to keep with its member")
	}
	var want []string
	for i, data := range shards {
		s := checkScanSplitRead(t, WDS{}, data)
		want = append(want, tarSamples(t, data)...)
		if n := len(tarSamples(t, data)); n != len(s.recs) {
			t.Fatalf("shard %d: %d records, archive/tar finds %d samples", i, len(s.recs), n)
		}
	}
	if len(want) != 6 {
		t.Fatalf("%d samples in the shards, want 6", len(want))
	}
	dir := t.TempDir()
	for seed := range uint64(4) {
		p, _ := part(t, WDS{}, shards, seed)
		if got := tarSamples(t, p); !sameMultiset(got, want) {
			t.Fatalf("part samples %q, want %q in some order", got, want)
		}
		// The part reads back through the format's own reader too.
		rd := WDS{}.NewReader(bytes.NewReader(p))
		n := 0
		for {
			_, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("reader on the part: %v", err)
			}
			n++
		}
		if n != 6 {
			t.Fatalf("reader found %d samples in the part, want 6", n)
		}
		// SampleMembers sees in each sample what archive/tar sees.
		var got []string
		rd = WDS{}.NewReader(bytes.NewReader(p))
		for {
			sample, err := rd.Next()
			if err == io.EOF {
				break
			}
			var s string
			if err := SampleMembers(sample, func(name string, data []byte) error {
				s += name + "=" + string(data) + ";"
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		if !sameMultiset(got, want) {
			t.Fatalf("SampleMembers: %q, want %q", got, want)
		}
		if _, err := exec.LookPath("tar"); err == nil {
			path := filepath.Join(dir, fmt.Sprintf("part-%d.tar", seed))
			if err := os.WriteFile(path, p, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("tar", "-tvf", path).CombinedOutput()
			if err != nil || strings.Contains(string(out), "warning") {
				t.Fatalf("GNU tar -tvf: %v\n%s", err, out)
			}
		}
	}
}

func TestWDSKeyIsWebDatasetsBasePlusExt(t *testing.T) {
	for _, n := range []string{"a.b", "a.b.c", "d/a.b", "d.e/a.b", "d/.h", "d.e/.h", ".h", "a", "d/a", "a.", "x/y/z.q.r", "d.x/e/.h", "__meta__", "d/__meta__.x", "a/b.c/d"} {
		k, ok := wdsKey([]byte(n), '0')
		m := wdsRE.FindStringSubmatch(n)
		meta := !strings.Contains(n, "/") && strings.HasPrefix(n, "__") && strings.HasSuffix(n, "__")
		if want := m != nil && !meta; ok != want || (ok && string(k) != m[1]) {
			t.Errorf("wdsKey(%q) = %q, %v; the regexp says %v", n, k, ok, m)
		}
	}
	dirOnly := shard(t, 0, member{name: "d/", typ: tar.TypeDir}, member{name: "README", data: "hi"})
	if s := checkScanSplitRead(t, WDS{}, dirOnly); len(s.recs) != 0 {
		t.Errorf("a shard without keyed members has %d records", len(s.recs))
	}
	if _, ok := wdsKey([]byte("a.b"), '5'); ok {
		t.Error("a directory has a key")
	}
}

func TestWDSDamageIsAnErrorNamingTheMemberAndOffset(t *testing.T) {
	good := shard(t, 0, member{name: "a.cls", data: "1"}, member{name: "a.bin", data: "xx"}, member{name: "b.cls", data: "2"})
	flip := bytes.Clone(good)
	flip[1024+3] ^= 1 // in the name of the second member's header
	after := append(bytes.Clone(good), bytes.Repeat([]byte{1}, 512)...)
	for _, c := range []struct {
		name string
		data []byte
		want string
		off  int64
	}{
		{"bad checksum", flip, "checksum", 1024},
		{"global pax header", shard(t, 0, member{name: "a.cls", data: "1"}, member{name: "g", typ: tar.TypeXGlobalHeader}, member{name: "b.cls", data: "1"}), "global pax header", 1024},
		{"key not consecutive", shard(t, 0, member{name: "a.cls", data: "1"}, member{name: "b.cls", data: "1"}, member{name: "a.bin", data: "1"}), `member "a.bin": key "a" already has members`, 2048},
		{"truncated at a member", good[:2048], "truncated tar: no end-of-archive marker", 2048},
		{"truncated in data", good[:1536], "runs past the end", 1024},
		{"data after the end", after, "data after the end-of-archive marker", int64(len(good))},
	} {
		_, err := scanFile(WDS{}, c.data)
		var ce *CorruptError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, c.want) || ce.Offset != c.off {
			t.Errorf("%s: got %v, want a *CorruptError at %d saying %q", c.name, err, c.off, c.want)
		}
		// The reader finds the same damage (reading parts in tests).
		if c.name == "truncated in data" || c.name == "data after the end" {
			continue
		}
		rd := WDS{}.NewReader(bytes.NewReader(c.data))
		var rerr error
		for rerr == nil {
			_, rerr = rd.Next()
		}
		if !strings.Contains(fmt.Sprint(rerr), c.want) {
			t.Errorf("%s: reader got %v", c.name, rerr)
		}
	}
	if _, err := (WDS{}).Head(bytes.NewReader(good[:1000]), 1000); err == nil {
		t.Error("a shard of 1000 bytes has a head")
	}
	// Loading a block whose header rotted is caught too.
	s, err := scanFile(WDS{}, good)
	if err != nil {
		t.Fatal(err)
	}
	blk := s.block(flip, 0, len(s.recs))
	if _, _, err := (WDS{}).SplitFilled(s.head, blk, int64(len(blk)), 0, 0, nil); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("split of a block with a bad header: %v", err)
	}
}

func TestWDSSampleSplitAcrossShardsIsAnError(t *testing.T) {
	a := shard(t, 0, member{name: "k1.cls", data: "1"}, member{name: "k2.cls", data: "1"})
	b := shard(t, 0, member{name: "k2.bin", data: "1"}, member{name: "k3.cls", data: "1"})
	keys := func(data []byte) (string, string) {
		sc := WDS{}.Scan(bytes.NewReader(data), Head{End: int64(len(data))}, 0, int64(len(data)))
		for sc.Next() {
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
		return sc.(interface{ SampleKeys() (string, string) }).SampleKeys()
	}
	_, lastA := keys(a)
	firstB, lastB := keys(b)
	if firstB != "k2" || lastB != "k3" {
		t.Fatalf("keys of b: %q %q", firstB, lastB)
	}
	err := ShardEdgeError("a.tar", lastA, "b.tar", firstB)
	if err == nil || !strings.Contains(err.Error(), "a.tar") || !strings.Contains(err.Error(), "b.tar") || !strings.Contains(err.Error(), `"k2"`) {
		t.Fatalf("got %v", err)
	}
	if err := ShardEdgeError("b.tar", lastB, "a.tar", "k1"); err != nil {
		t.Fatal(err)
	}
	// Any key in two shards, not only at their edges.
	c := shard(t, 0, member{name: "k9.cls", data: "1"}, member{name: "k1.cls", data: "1"}, member{name: "k8.cls", data: "1"})
	keySet := func(data []byte) func(func(string) bool) {
		sc := WDS{}.Scan(bytes.NewReader(data), Head{End: int64(len(data))}, 0, int64(len(data)))
		for sc.Next() {
		}
		return sc.(interface{ Keys() iter.Seq[string] }).Keys()
	}
	ks := NewKeySet()
	if err := ks.Add("a.tar", keySet(a)); err != nil {
		t.Fatal(err)
	}
	err = ks.Add("c.tar", keySet(c))
	if err == nil || !strings.Contains(err.Error(), `"k1"`) || !strings.Contains(err.Error(), "a.tar") || !strings.Contains(err.Error(), "c.tar") {
		t.Fatalf("duplicate key: %v", err)
	}
}

func TestWDSShardsWrittenByGNUTarInEveryFormat(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		testenv.Missing(t, "GNU tar is not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	long := strings.Repeat("n", 120)
	var names []string
	for i := range 4 {
		for _, ext := range []string{"cls", "input.bin"} {
			name := fmt.Sprintf("s%d%s.%s", i, long[:i*40], ext) // names up to 120+ bytes
			if err := os.MkdirAll(filepath.Join(src, "train"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, "train", name), bytes.Repeat([]byte{byte('a' + i)}, 100*i+1), 0o644); err != nil {
				t.Fatal(err)
			}
			names = append(names, "train/"+name)
		}
	}
	var shards [][]byte
	for _, format := range []string{"gnu", "pax", "ustar", "v7"} {
		path := filepath.Join(dir, format+".tar")
		args := append([]string{"--format=" + format, "--no-recursion", "-C", src, "-cf", path, "train"}, names...)
		if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
			if format == "ustar" || format == "v7" {
				continue // names too long for the old formats
			}
			t.Fatalf("tar %s: %v\n%s", format, err, out)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := checkScanSplitRead(t, WDS{}, data)
		if len(s.recs) != 4 {
			t.Fatalf("%s: %d samples, want 4", format, len(s.recs))
		}
		if got := tarSamples(t, data); len(got) != 4 {
			t.Fatalf("%s: archive/tar finds %d samples", format, len(got))
		}
		shards = append(shards, data)
	}
	// The gnu and pax shards hold the same keys: a dataset of one of them.
	p, _ := part(t, WDS{}, shards[:1], 3)
	path := filepath.Join(dir, "part.tar")
	if err := os.WriteFile(path, p, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tar", "-tf", path).CombinedOutput()
	if err != nil {
		t.Fatalf("tar -tf part: %v\n%s", err, out)
	}
	if got := strings.Count(string(out), "\n"); got != 8 { // the directory is not served
		t.Fatalf("tar lists %d members in the part, want 8 files:\n%s", got, out)
	}
}
