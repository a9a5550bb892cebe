package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/formats"
)

// formatFlags are the flags that say the records' format: mount, index and
// order take them.
type formatFlags struct {
	name        string
	header      bool
	check       bool
	recordSize  int64
	headerBytes int64
	// set records which of the format's options were given, so that one
	// given a value for another format is an error rather than ignored.
	set map[string]bool

	format  formats.Format // nil: chosen from the file names
	options formats.Options
}

func (f *formatFlags) register(fs *flag.FlagSet) {
	f.set = map[string]bool{}
	fs.Func("format", "`format` of the records: "+strings.Join(formats.Names(), ", ")+
		"\n(default: chosen from the file extensions; files of two formats are an error)", func(s string) error {
		f.name = s
		return nil
	})
	f.header = true
	fs.BoolFunc("header", "csv: the first row of every file is the header, served once at the start of\nevery part (default true; --header=false: none)", func(s string) error {
		b, err := strconv.ParseBool(s)
		f.header, f.set["header"] = b, true
		return err
	})
	fs.BoolFunc("check", "jsonl: check that every line is one JSON value when indexing", func(s string) error {
		b, err := strconv.ParseBool(s)
		f.check, f.set["check"] = b, true
		return err
	})
	fs.Func("record-size", "fixed: `bytes` of every record", func(s string) error {
		_, err := fmt.Sscan(s, &f.recordSize)
		f.set["record-size"] = true
		return err
	})
	fs.Func("header-bytes", "fixed: `bytes` of header at the start of every source file, never served\n(default 0)", func(s string) error {
		_, err := fmt.Sscan(s, &f.headerBytes)
		f.set["header-bytes"] = true
		return err
	})
}

// resolve checks the flags and looks the format up, unless it is to be
// chosen from the file names.
func (f *formatFlags) resolve() error {
	f.options = formats.Options{NoHeader: !f.header, CheckJSON: f.check, RecordSize: f.recordSize, HeaderBytes: f.headerBytes}
	// An option of another format is an error unless it has its default
	// value (a script may pass --header=true whatever the format).
	changed := map[string]bool{"header": !f.header, "check": f.check, "record-size": f.recordSize != 0, "header-bytes": f.headerBytes != 0}
	for opt, of := range map[string]string{"header": "csv", "check": "jsonl", "record-size": "fixed", "header-bytes": "fixed"} {
		if f.set[opt] && changed[opt] && f.name != of && (f.name != "" || of == "fixed") {
			return fmt.Errorf("--%s is an option of --format %s", opt, of)
		}
	}
	if f.name == "" {
		return nil
	}
	var err error
	if f.format, err = formats.Lookup(f.name, f.options); err != nil {
		return fmt.Errorf("--format: %w", err)
	}
	return nil
}
