package main

import (
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

func TestMountHelperTurnsEveryOptionIntoAMountFlag(t *testing.T) {
	cases := []struct {
		args []string
		want []string
		fake bool
	}{
		{[]string{"/src", "/mnt", "-o", "seed=7,parts=8,buffer=5%"},
			[]string{"mount", "--seed=7", "--parts=8", "--buffer=5%", "--background", "/src", "/mnt"}, false},
		// What mount(8) passes for an fstab line: generic options are
		// left to it, underscores stand for dashes, a bare name is a
		// boolean flag, include's globs are separated by ':'.
		{[]string{"/src", "/mnt", "-o", "rw,defaults,noauto,nofail,_netdev,user,x-systemd.automount,max_memory=2GiB,skip_corrupt,include=*.csv:*.jsonl,direct-io=false", "-t", "fuse.corgifs"},
			[]string{"mount", "--max-memory=2GiB", "--skip-corrupt", "--include=*.csv,*.jsonl", "--direct-io=false", "--background", "/src", "/mnt"}, false},
		{[]string{"-oseed=1,foreground", "-n", "/src", "/mnt"},
			[]string{"mount", "--seed=1", "/src", "/mnt"}, false},
		{[]string{"/src", "/mnt", "-fv", "-o", "ro"},
			[]string{"mount", "--background", "/src", "/mnt"}, true},
	}
	for _, c := range cases {
		got, fake, err := helperArgs(c.args)
		if err != nil || !slices.Equal(got, c.want) || fake != c.fake {
			t.Errorf("helperArgs(%q) = %q, fake %v, %v; want %q, fake %v", c.args, got, fake, err, c.want, c.fake)
		}
	}
	for _, bad := range [][]string{{"/src"}, {"/src", "/mnt", "-o"}, {"/src", "/mnt", "-x"}} {
		if _, _, err := helperArgs(bad); err == nil {
			t.Errorf("helperArgs(%q) accepted", bad)
		}
	}
}

func TestMountHelperNamesAnUnknownOptionAndTheValidOnesInOneLine(t *testing.T) {
	_, _, err := helperArgs([]string{"/src", "/mnt", "-o", "seed=7,buffr=5%"})
	if err == nil {
		t.Fatal("buffr accepted")
	}
	msg := err.Error()
	for _, want := range []string{`unknown option "buffr"`, "buffer", "parts", "max-memory", "cache-dir", "foreground", "_netdev"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	var stderr strings.Builder
	if code := run([]string{"mount-helper", "/src", "/mnt", "-o", "buffr=5%"}, io.Discard, &stderr); code != 2 || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("mount-helper with an unknown option: exit %d, stderr (want one line):\n%s", code, stderr.String())
	}
	if _, _, err := helperArgs([]string{"/src", "/mnt", "-o", "parts"}); err == nil || !strings.Contains(err.Error(), `option "parts" needs a value: parts=VALUE`) {
		t.Errorf("bare parts: %v", err)
	}
}

func TestVersionNamesTheModuleVersionAndTheCommit(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T01:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	got := formatVersion(bi, "1.2.3", "")
	for _, want := range []string{"corgifs v1.2.3 (revision 0123456789ab,", "2026-11-23T01:00:00Z", "modified", "go1.26.8"} {
		if !strings.Contains(got, want) {
			t.Errorf("formatVersion = %q, want it to contain %q", got, want)
		}
	}
	if got := formatVersion(&debug.BuildInfo{}, "0.1.0", ""); !strings.HasPrefix(got, "corgifs v0.1.0 (no vcs revision recorded)") {
		t.Errorf("formatVersion without build settings = %q", got)
	}
	// A release build: -buildvcs=false, the commit stamped by the builder.
	if got := formatVersion(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "0.1.0", "fedcba9876543210"); !strings.HasPrefix(got, "corgifs v0.1.0 (revision fedcba987654)") {
		t.Errorf("formatVersion of a stamped build = %q", got)
	}
	if got := formatVersion(&debug.BuildInfo{Main: debug.Module{Version: "v0.1.1-0.20261127000000-abcdef123456"}}, "0.1.0", ""); !strings.Contains(got, "(module v0.1.1-0.20261127000000-abcdef123456)") {
		t.Errorf("formatVersion of a pseudo-version = %q", got)
	}
}
