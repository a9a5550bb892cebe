package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionLine says which corgifs this is: the module version, the commit it
// was built from when the build recorded one (go build in a git clone;
// -buildvcs=false or a git worktree leaves it out), and the Go toolchain.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Sprintf("corgifs (unknown version, no build information) %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	return formatVersion(bi)
}

func formatVersion(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "corgifs %s", v)
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		fmt.Fprintf(&b, " (revision %s", rev)
		if at != "" {
			fmt.Fprintf(&b, ", %s", at)
		}
		if modified {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	} else {
		b.WriteString(" (no vcs revision recorded)")
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	fmt.Fprintf(&b, " %s %s/%s", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// wantsVersion reports whether args, the arguments of a command, ask for
// the version: --version answers on every command, before its own flags
// are checked.
func wantsVersion(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version":
			return true
		}
	}
	return false
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("version", "", "Prints the version of corgifs: module version, vcs revision, Go version.", stderr)
	if _, err := parse(fset, args, 0); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}
