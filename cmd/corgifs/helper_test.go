package main

import (
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
		{[]string{"-ofoo=1,foreground", "-n", "/src", "/mnt"},
			[]string{"mount", "--foo=1", "/src", "/mnt"}, false},
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

func TestVersionNamesTheModuleVersionAndTheCommit(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T01:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	got := formatVersion(bi)
	for _, want := range []string{"corgifs v1.2.3", "revision 0123456789ab,", "2026-11-23T01:00:00Z", "modified", "go1.26.8"} {
		if !strings.Contains(got, want) {
			t.Errorf("formatVersion = %q, want it to contain %q", got, want)
		}
	}
	if got := formatVersion(&debug.BuildInfo{}); !strings.Contains(got, "(devel)") || !strings.Contains(got, "no vcs revision") {
		t.Errorf("formatVersion without build settings = %q", got)
	}
}
