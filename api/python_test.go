package api

import (
	"encoding"
	"encoding/json"
	"errors"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/internal/testenv"
)

// notWritten are keys the Python package reads that no mount has written,
// each with why it stays: the test fails on any other key the Go types do
// not have, and on an entry here the Python package no longer reads.
var notWritten = map[string]string{
	"config.json ext":         "read as a fallback for extension; config.json has always said extension",
	"config.json format.name": "order() and reader_of() accept format as {\"name\": ...}; config.json's format is a string",
}

// TestPythonReadsOnlyKeysTheMountWrites checks the Python package
// (python/corgifs) against the types the mount writes its files with:
// every key it reads from config.json, stats.json or status.json, with
// its path (dataset.skipped_corrupt.count), is a JSON key of Config,
// Stats or Status. Renaming a Go field's JSON name, or reading a new key
// in Python that the mount does not write, fails here rather than in a
// user's training run.
//
// The keys come from a parse of the Python source (testdata/pykeys.py,
// Python's ast module, following the values json.load returns), not from
// importing the package: importing it imports torch, and a run would see
// only the branches it takes.
func TestPythonReadsOnlyKeysTheMountWrites(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Missing(t, "no python3 on PATH (Debian package python3)")
	}
	out, err := exec.Command(py, "testdata/pykeys.py", "../python/corgifs").Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("testdata/pykeys.py ../python/corgifs: %v\n%s", err, stderr)
	}
	var got struct {
		Readers map[string]string
		Reads   []struct{ File, Key, Where string }
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("testdata/pykeys.py printed no JSON (%v):\n%s", err, out)
	}
	// The analysis must have found the readers, or it checks nothing.
	var readers []string
	for _, f := range got.Readers {
		readers = append(readers, f)
	}
	for _, f := range []string{ConfigFile, StatusFile} {
		if !slices.Contains(readers, f) {
			t.Fatalf("pykeys.py found no function of python/corgifs that returns %s (readers: %v): has the reader moved or changed shape?", f, got.Readers)
		}
	}

	written := map[string][]string{
		ConfigFile: jsonKeys(reflect.TypeFor[Config]()),
		StatsFile:  jsonKeys(reflect.TypeFor[Stats]()),
		StatusFile: jsonKeys(reflect.TypeFor[Status]()),
	}
	used := map[string]bool{}
	for _, r := range got.Reads {
		name := r.File + " " + r.Key
		if _, ok := notWritten[name]; ok {
			used[name] = true
			continue
		}
		if !slices.ContainsFunc(written[r.File], func(k string) bool { return keyMatches(k, r.Key) }) {
			t.Errorf("python/corgifs/%s reads %q from %s, which the mount does not write (api's types have no such JSON key)", r.Where, r.Key, r.File)
		}
	}
	for name, why := range notWritten {
		if !used[name] {
			t.Errorf("notWritten lists %q (%s), which python/corgifs no longer reads: remove it", name, why)
		}
	}
	if len(got.Reads) < 10 {
		t.Errorf("pykeys.py found only %d reads in python/corgifs; it parses less than it should:\n%s", len(got.Reads), out)
	}
}

// keyMatches says whether the dotted path p (a Python read) is the JSON
// key k of a Go type, where a "*" in k is a map's key or any value below
// an interface.
func keyMatches(k, p string) bool {
	ks, ps := strings.Split(k, "."), strings.Split(p, ".")
	for i, s := range ps {
		if i >= len(ks) {
			return false
		}
		if ks[i] == "**" {
			return true
		}
		if ks[i] != "*" && ks[i] != s {
			return false
		}
	}
	return len(ks) == len(ps)
}

// jsonKeys lists the dotted JSON paths of t as encoding/json writes it:
// every prefix (a Python reader reads "dataset" before
// "dataset.records"), embedded structs' fields flattened, slices and
// pointers looked through, a map's keys as "*", an interface as "**"
// (anything below).
func jsonKeys(t reflect.Type) []string {
	var keys []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		join := func(s string) string {
			if prefix == "" {
				return s
			}
			return prefix + "." + s
		}
		if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Marshaler]()) || reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextMarshaler]()) {
			return // written as a value (time.Time), no keys below
		}
		switch t.Kind() {
		case reflect.Interface:
			keys = append(keys, join("**"))
		case reflect.Map:
			k := join("*")
			keys = append(keys, k)
			walk(t.Elem(), k)
		case reflect.Struct:
			for i := range t.NumField() {
				f := t.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "-" || !f.IsExported() && !f.Anonymous {
					continue
				}
				if f.Anonymous && name == "" {
					walk(f.Type, prefix)
					continue
				}
				if name == "" {
					name = f.Name
				}
				keys = append(keys, join(name))
				walk(f.Type, join(name))
			}
		}
	}
	walk(t, "")
	return keys
}
