package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/mount"
)

func TestDaemonLogWritesOptionPlaceholdersAsFlags(t *testing.T) {
	var b bytes.Buffer
	log := newLogger(&b, false).With("hint", "use {index} full")
	log.Warn("buffer lowered to fit in {max-memory}", "why", "{buffer} given", "err", errors.New("raise {max-memory}"),
		slog.Group("g", "fix", "pass {compression} none"), "n", 3, "json", `{"a":1}`)
	got := b.String()
	for _, want := range []string{"buffer lowered to fit in --max-memory", "hint=\"use --index full\"", "why=\"--buffer given\"",
		"err=\"raise --max-memory\"", "g.fix=\"pass --compression none\"", "n=3", `json="{\"a\":1}"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "{max-memory}") {
		t.Errorf("log %q keeps a placeholder", got)
	}
}

func TestPrintedErrorsWriteOptionPlaceholdersAsFlags(t *testing.T) {
	oe := &mount.OptionError{Option: "max-memory", Reason: "{max-memory} 1: use at least {max-memory} 2"}
	err := flagError(fmt.Errorf("open /data: %w", oe))
	if got, want := err.Error(), "open /data: --max-memory 1: use at least --max-memory 2"; got != want {
		t.Errorf("flagError: %q, want %q", got, want)
	}
	var back *mount.OptionError
	if !errors.As(err, &back) || back != oe {
		t.Errorf("flagError lost the *OptionError: %#v", err)
	}
	if flagError(nil) != nil {
		t.Error("flagError(nil) is not nil")
	}
	// A library's error (index: unknown {compression}) as the CLI prints it.
	var stderr bytes.Buffer
	src := t.TempDir()
	if code := run([]string{"order", "--seed", "1", "--cache-dir", t.TempDir(), "--compression", "bogus", src}, &bytes.Buffer{}, &stderr); code == 0 {
		t.Fatalf("order with --compression bogus exited 0")
	}
	if got := stderr.String(); !strings.Contains(got, `corgifs order: unknown --compression "bogus"`) || strings.ContainsAny(got, "{}") {
		t.Errorf("stderr %q, want the flag --compression and no placeholder", got)
	}
}
