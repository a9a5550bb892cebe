//go:build linux

package main

import (
	"io"
	"testing"
)

// `go run ./bench --formats` must run the formats section alone, at its own
// modest default size; --warm and --size given with it are obeyed.
func TestFormatsAloneRunsOnlyItsSectionAtItsOwnDefaultSize(t *testing.T) {
	for _, c := range []struct {
		args []string
		warm bool
		size int64
	}{
		{[]string{"--formats"}, false, formatsDefaultSize},
		{[]string{"--formats", "--warm"}, true, formatsDefaultSize},
		{[]string{"--formats", "--size", "1GiB"}, false, 1 << 30},
		{[]string{"--all"}, true, formatsDefaultSize},
	} {
		o, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !o.formats || o.warm != c.warm || o.formatsSize() != c.size {
			t.Errorf("%q: formats %v, warm %v, formats size %d; want true, %v, %d", c.args, o.formats, o.warm, o.formatsSize(), c.warm, c.size)
		}
	}
	if o, _ := parseFlags(nil, io.Discard); o.formats || !o.warm {
		t.Errorf("no flags: formats %v, warm %v; want only warm", o.formats, o.warm)
	}
}
