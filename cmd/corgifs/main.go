// Command corgifs mounts a directory of TFRecord files as a read-only file
// system whose per-epoch part files serve the records in a CorgiPile order.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

type command struct {
	name    string
	args    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"mount", "SRC MNT", "serve SRC at MNT until interrupted", runMount},
		{"unmount", "MNT", "unmount MNT, also a mount left behind by a killed daemon", runUnmount},
		{"index", "SRC", "build or refresh the index of SRC and print a summary", runIndex},
		{"order", "SRC", "print the record order of one part (file offset length)", runOrder},
		{"gen", "KIND OUT", "write a dataset: synthetic, or fashion-mnist from its idx files", runGen},
		{"validate", "", "train models on several orders side by side (SGD validator)", runValidate},
		{"demo", "", "make a dataset, mount it, read epochs and show the orders", runDemo},
		{"herding", "", "simulate the parallel herding bound of D-RR, ID-GraB and CD-GraB orders", runHerding},
		{"tune", "SRC", "measure SRC's storage and data; print the block and buffer sizes they need", runTune},
		{"stats", "MNT", "show the live counters of a mount, every second", runStats},
		{"install-helper", "", "link mount.fuse.corgifs into /sbin so that mount -t fuse.corgifs and fstab work", runInstallHelper},
		{"mount-helper", "SRC MNT [-o OPTS]", "what mount(8) runs for -t fuse.corgifs: -o name=value for every mount flag", runMountHelper},
		{"version", "", "print the version", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `corgifs serves a directory of TFRecord files as per-epoch part files whose
records come in a CorgiPile order: random blocks, shuffled inside a buffer.

Usage: corgifs COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %-17s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'corgifs COMMAND --help' for the flags of a command and their defaults.\n")
}

func main() {
	// mount(8) runs /sbin/mount.fuse.corgifs, a link to this binary, for
	// -t fuse.corgifs and fstab lines (helper.go).
	if filepath.Base(os.Args[0]) == helperName {
		os.Exit(run(append([]string{"mount-helper"}, os.Args[1:]...), os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-version", "--version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if wantsVersion(args[1:]) {
				fmt.Fprintln(stdout, versionLine())
				return 0
			}
			err := c.run(args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				return 2
			}
			if e, ok := errors.AsType[errExit](err); ok {
				return e.code
			}
			fmt.Fprintf(stderr, "corgifs %s: %s\n", c.name, flagText(err))
			return 1
		}
	}
	fmt.Fprintf(stderr, "corgifs: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// errUsage marks an error already explained on stderr with the usage.
var errUsage = errors.New("usage")

func newLogger(w io.Writer, debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(flagHandler{slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})})
}
