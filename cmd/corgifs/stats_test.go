package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestStatsShowsTheLatestEpochsAsATable(t *testing.T) {
	raw := `{"bytes_served": 100, "epochs": {`
	for e := range 12 {
		if e > 0 {
			raw += ","
		}
		raw += `"` + string(rune('0'+e/10)) + string(rune('0'+e%10)) + `": {"source_bytes": 1048576, "disk_cache_bytes": 3145728, "memory_bytes": 0}`
	}
	raw += `}, "equal_parts_padding_epoch0": 3}`
	s := statsSample{at: time.Now()}
	if err := json.Unmarshal([]byte(raw), &s.c); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &s.raw); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	drawStats(&b, "/mnt", between(s, s), s)
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{"epoch", "source", "disk cache", "not source", "(4 earlier epochs not shown)", "equal_parts_padding_epoch0"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats view lacks %q", want)
		}
	}
	if !regexpRow(out, "11", "1.0", "MiB", "3.0", "MiB", "0", "B", "75.0", "%") {
		t.Errorf("no row for epoch 11: 1 MiB from the source, 3 MiB from the disk cache, 75 %% not from the source")
	}
	if strings.Contains(out, "source_bytes") || regexpRow(out, "3", "1.0", "MiB", "3.0", "MiB", "0", "B", "75.0", "%") {
		t.Errorf("the view shows raw JSON or more than the latest 8 epochs")
	}
}

func regexpRow(s string, fields ...string) bool {
	for line := range strings.Lines(s) {
		if strings.Join(strings.Fields(line), " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

// With an object store, the view shows the GETs of each epoch and per GiB
// they brought, and those of the whole mount.
func TestStatsShowsGETsPerEpochAndPerGiBOfAnObjectStore(t *testing.T) {
	raw := `{"bytes_read": 2147483648, "epochs": {"0": {"source_bytes": 1073741824, "source_gets": 1024, "disk_cache_bytes": 0, "memory_bytes": 0},
		"1": {"source_bytes": 1073741824, "source_gets": 512, "disk_cache_bytes": 0, "memory_bytes": 0}},
		"source": {"requests": 1600, "gets": 1536, "get_bytes": 2147483648}}`
	s, err := parseStats([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	l := between(s, s)
	drawStats(&b, "/mnt", l, s)
	out := b.String()
	t.Logf("\n%s", out)
	if !regexpRow(out, "0", "1.0", "GiB", "0", "B", "0", "B", "0.0", "%", "1024", "1024") || !regexpRow(out, "1", "1.0", "GiB", "0", "B", "0", "B", "0.0", "%", "512", "512") {
		t.Errorf("no rows of 1024 and 512 GETs for 1 GiB each")
	}
	if !strings.Contains(out, "1536 in all for 2.0 GiB: 768 GETs per GiB; 1600 requests of every kind") || l.SourceGETsPerGiB != 768 {
		t.Errorf("no line of the mount's GETs per GiB (%v)", l.SourceGETsPerGiB)
	}
}
