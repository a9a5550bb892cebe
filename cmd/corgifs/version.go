package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/corgifs/corgifs"
)

// commit is the git commit a release build was made from, stamped by the
// release builder with -ldflags "-X main.commit=...": builds with
// -buildvcs=false (as reproducible release builds are, and as GOFLAGS
// sets on some machines) and builds in a git worktree record none in the
// build information. Set only at link time, never written.
var commit string

// versionLine says which corgifs this is: the release (corgifs.Version),
// the commit it was built from when the build recorded or was stamped
// with one, and the Go toolchain.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{GoVersion: runtime.Version()}
	}
	return formatVersion(bi, corgifs.Version, commit)
}

// formatVersion formats the version line of release and the build
// information bi; stamped, if not empty, is the commit the release
// builder stamped, used when bi records none.
func formatVersion(bi *debug.BuildInfo, release, stamped string) string {
	v := "v" + strings.TrimPrefix(release, "v")
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" && !strings.HasPrefix(mv, v) {
		// go install ...@version of another tag or a pseudo-version:
		// the module version says which source this is.
		v += " (module " + mv + ")"
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
	if rev == "" {
		rev = stamped
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
	fset := newFlagSet("version", "", "Prints the version of corgifs: release, commit, Go version.", stderr)
	if _, err := parse(fset, args, 0); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}
