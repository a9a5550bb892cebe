package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/corgifs/corgifs/mount"
)

// helperName is the program mount(8) runs for `mount -t fuse.corgifs` and
// for fstab lines of type fuse.corgifs: util-linux looks for
// mount.<type> in /sbin, /sbin/fs.d and /sbin/fs.
const helperName = "mount.fuse.corgifs"

// genericOption reports whether name is one of the generic mount options of mount(8) and fstab(5)
// that mean nothing to corgifs or are handled by mount(8) itself (auto,
// user, _netdev, nofail decide when and by whom a line is mounted). A
// corgifs mount is always read-only, so rw is accepted as the default
// mount(8) passes and means the same.
func genericOption(name string) bool {
	switch name {
	case "defaults", "rw", "ro", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev", "nofail", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync", "dirsync", "atime", "noatime", "relatime", "norelatime", "strictatime", "nodiratime", "diratime", "lazytime", "nolazytime", "loud", "silent", "mand", "nomand":
		return true
	}
	return false
}

// helperArgs turns the arguments mount(8) gives a helper
// (SRC MNT [-sfnv] [-o OPTS] [-t TYPE]) into those of `corgifs mount`:
// every name=value of -o becomes --name=value (underscores may stand for
// dashes: max_memory=2GiB), a bare name becomes --name (a boolean flag),
// and the mount is started with --background unless -o foreground is
// given. include= takes its globs separated by ':' since ',' separates
// options. fake is -f: mount(8) asks only for a check.
func helperArgs(args []string) (out []string, fake bool, err error) {
	var pos, opts []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o":
			if i+1 == len(args) {
				return nil, false, errors.New("-o without options")
			}
			i++
			opts = append(opts, strings.Split(args[i], ",")...)
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, strings.Split(a[2:], ",")...)
		case a == "-t":
			i++ // the type: fuse.corgifs
		case strings.HasPrefix(a, "-t"):
		case len(a) > 1 && a[0] == '-' && strings.Trim(a[1:], "sfnvw") == "":
			// sloppy, fake, no mtab, verbose, rw (-w): only -f changes
			// what happens.
			fake = fake || strings.Contains(a, "f")
		case strings.HasPrefix(a, "-"):
			return nil, false, fmt.Errorf("option %s: mount(8) passes only -o, -t, -s, -f, -n, -v to %s", a, helperName)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, false, fmt.Errorf("want SRC MNT, got %d argument(s): %q", len(pos), pos)
	}
	background := true
	var flags []string
	for _, o := range opts {
		name, value, hasValue := strings.Cut(strings.TrimSpace(o), "=")
		switch {
		case name == "":
			continue
		case genericOption(name), strings.HasPrefix(name, "x-"), name == "comment":
			continue
		case name == "foreground":
			background = false
			continue
		case name == "background":
			continue
		}
		name = strings.ReplaceAll(name, "_", "-")
		if err := checkHelperOption(name, hasValue); err != nil {
			return nil, false, err
		}
		if name == "include" {
			value = strings.ReplaceAll(value, ":", ",")
		}
		if hasValue {
			flags = append(flags, "--"+name+"="+value)
		} else {
			flags = append(flags, "--"+name)
		}
	}
	out = append([]string{"mount"}, flags...)
	if background {
		out = append(out, "--background")
	}
	return append(out, pos...), fake, nil
}

// checkHelperOption refuses an -o option that is neither an option of a
// mount (mount.Options) nor a flag of corgifs mount, or a bare name of one
// that needs a value, in one line that lists the valid options: mount's
// own error would be followed by its whole usage, 150 lines of --flags
// where -o options were given.
func checkHelperOption(name string, hasValue bool) error {
	if o, ok := mount.LookupOption(name); ok && o.For(mount.CmdMount) {
		if !hasValue && o.Kind != mount.KindBool {
			_, def := o.Usage(mount.CmdMount)
			return fmt.Errorf("option %q needs a value: %s=VALUE (default %s)", name, name, def)
		}
		return nil
	}
	// The flags of mount that are no option of a Config (--debug,
	// --nonempty, --log-file, the format's) are options too.
	fset, _ := newMountFlagSet(io.Discard)
	f := fset.Lookup(name)
	switch {
	case f == nil || name == "background" || name == "version":
		var valid []string
		fset.VisitAll(func(f *flag.Flag) {
			if f.Name != "background" && f.Name != "version" {
				valid = append(valid, f.Name)
			}
		})
		return fmt.Errorf("unknown option %q; valid: %s, foreground, and mount(8)'s generic options (defaults, noauto, nofail, _netdev, x-*, ...)", name, strings.Join(valid, ", "))
	case !hasValue && !isBoolFlag(f):
		return fmt.Errorf("option %q needs a value: %s=VALUE (default %s)", name, name, f.DefValue)
	}
	return nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func runMountHelper(args []string, stdout, stderr io.Writer) error {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprintf(stderr, `Usage: %s SRC MNT [-o name=value,...]
       corgifs mount-helper SRC MNT [-o name=value,...]

What mount(8) runs for 'mount -t fuse.corgifs SRC MNT -o ...' and for fstab
lines of type fuse.corgifs (install it with 'corgifs install-helper'). Every
flag of 'corgifs mount' is an option: seed=7,parts=8,buffer=5%%,max_memory=2GiB
(dashes or underscores), a bare name sets a boolean flag (allow_other,
skip-corrupt), include= separates its globs with ':'. The mount starts in
the background and the command returns once it serves (foreground keeps it
in the foreground). The generic options defaults, rw, ro, auto, noauto,
user, users, _netdev, nofail, x-* and the like are left to mount(8).
`, helperName)
			return nil
		}
	}
	margs, fake, err := helperArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", helperName, flagText(err))
		return errUsage
	}
	if fake {
		return nil
	}
	code := run(margs, stdout, stderr)
	if code != 0 {
		// run has printed why.
		return errExit{code}
	}
	return nil
}

// errExit ends the program with code after the message was printed.
type errExit struct{ code int }

func (e errExit) Error() string { return fmt.Sprintf("exit %d", e.code) }

func runInstallHelper(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("install-helper", "", `Links `+helperName+` in --dir to this corgifs binary, so that
'mount -t fuse.corgifs SRC MNT -o seed=7,parts=8' and /etc/fstab lines of type
fuse.corgifs work (util-linux's mount looks for helpers in /sbin, /sbin/fs.d
and /sbin/fs). Needs write access to --dir, so usually root.`, stderr)
	dir := fset.String("dir", "/sbin", "`directory` to put the "+helperName+" link in")
	force := fset.Bool("force", false, "replace an existing "+helperName+" that is not a link to this binary")
	if _, err := parse(fset, args, 0); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return err
	}
	link := filepath.Join(*dir, helperName)
	if old, err := os.Readlink(link); err == nil && old == self {
		fmt.Fprintf(stdout, "%s already links to %s\n", link, self)
		return nil
	} else if _, err := os.Lstat(link); err == nil {
		if !*force {
			return fmt.Errorf("%s exists and is not a link to %s; pass --force to replace it", link, self)
		}
		if err := os.Remove(link); err != nil {
			return err
		}
	}
	if err := os.Symlink(self, link); err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	fmt.Fprintf(stdout, "linked %s -> %s\n", link, self)
	return nil
}
