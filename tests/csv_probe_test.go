package tests

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
)

// A CSV dataset mounted with --index probe serves, byte for byte, the
// parts of a mount of it indexed in full (corgipile, K = 1 and 3, two
// epochs): the files whose rows have quoted fields (with newlines) are
// probed, and a long file without a quote, where a probe cannot know
// whether it is inside one quoted field, is scanned whole, said in the
// log.
func TestProbedCSVMountServesTheBytesOfAFullMount(t *testing.T) {
	var set formatSet
	for _, s := range formatSets(t) {
		if s.name == "csv" {
			set = s
		}
	}
	plain := []byte("id,label,text\n")
	for i := 0; len(plain) < 1300<<10; i++ {
		plain = fmt.Appendf(plain, "%d,%d,plain words %d\n", 5000+i, i%3, i)
	}
	src := set.write(t)
	writeFile(t, filepath.Join(src, "d.csv"), plain)
	flags := []string{"--seed", "3", "--parts", "3", "--block-size", "4KiB", "--buffer", "64KiB"}
	full := startMount(t, src, append(flags, "--index", "full")...)
	probed := startMount(t, src, append(flags, "--index", "probe")...)
	fp, pp := readAll(t, full), readAll(t, probed)
	for key, b := range fp {
		if !bytes.Equal(b, pp[key]) {
			t.Fatalf("part %s (epoch/part/K): %d bytes from the probed mount differ from %d bytes from the full one", key, len(pp[key]), len(b))
		}
	}
	if pc := readProbeConfig(t, probed); pc.Dataset.Index != "probe" {
		t.Fatalf("config.json of the probed mount: %+v; want index probe", pc.Dataset)
	}
	if log, ok := probed.logHas("scanning them whole", "files=1"); !ok {
		t.Fatalf("the log does not say one file was scanned whole:\n%s", log)
	}
}
