package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/mount"
)

var optionCommands = []struct {
	name string
	cmd  mount.Command
}{
	{"mount", mount.CmdMount}, {"order", mount.CmdOrder}, {"index", mount.CmdIndex},
	{"validate", mount.CmdValidate}, {"tune", mount.CmdTune},
}

// shownDefault is how flag.PrintDefaults shows the default def of an
// option of kind k, "" where it shows none.
func shownDefault(k mount.Kind, def string) string {
	switch {
	case def == "", k == mount.KindBool && def == "false", k == mount.KindInt && def == "0", k == mount.KindDuration && def == "0s":
		return ""
	case k == mount.KindString:
		return `(default "` + def + `")`
	}
	return "(default " + def + ")"
}

func TestEveryOptionIsInTheHelpOfItsCommandsWithItsDefault(t *testing.T) {
	for _, c := range optionCommands {
		var stderr strings.Builder
		if code := run([]string{c.name, "--help"}, io.Discard, &stderr); code != 0 {
			t.Fatalf("%s --help: exit %d", c.name, code)
		}
		help := stderr.String()
		// The usage of each flag: from its "  -name" line to the next.
		usage := map[string]string{}
		for _, part := range strings.Split(help, "\n  -")[1:] {
			name, _, _ := strings.Cut(part, " ")
			name, _, _ = strings.Cut(name, "\n")
			usage[name] = part
		}
		for _, o := range mount.Options() {
			if !o.For(c.cmd) {
				continue
			}
			u, ok := usage[o.Name]
			if !ok {
				t.Errorf("%s --help does not list -%s", c.name, o.Name)
				continue
			}
			text, def := o.Usage(c.cmd)
			_, words := flag.UnquoteUsage(&flag.Flag{Usage: text})
			if !strings.Contains(strings.Join(strings.Fields(u), " "), strings.Join(strings.Fields(words), " ")) {
				t.Errorf("%s --help: -%s does not say the table's help %q:\n%s", c.name, o.Name, words, u)
			}
			if want := shownDefault(o.Kind, def); want != "" && !strings.HasSuffix(strings.TrimSpace(u), want) {
				t.Errorf("%s --help: -%s does not end with %s:\n%s", c.name, o.Name, want, u)
			}
			if want := shownDefault(o.Kind, def); want == "" && strings.Contains(u, ") (default ") {
				t.Errorf("%s --help: -%s shows a default the table does not:\n%s", c.name, o.Name, u)
			}
		}
	}
}

// ownFlags are flags of a command named as an option it does not take:
// validate's --epochs it trains and its flags of how it decodes the
// records, tune's --seed of its probe.
var ownFlags = map[string]map[string]bool{
	"validate": {"epochs": true, "format": true, "header": true, "record-size": true, "header-bytes": true},
	"tune":     {"seed": true},
}

func TestEveryOptionIsAFlagOfExactlyItsCommands(t *testing.T) {
	for _, c := range optionCommands {
		var stderr strings.Builder
		run([]string{c.name, "--help"}, io.Discard, &stderr)
		for _, o := range mount.Options() {
			listed := strings.Contains(stderr.String(), "\n  -"+o.Name+" ") || strings.Contains(stderr.String(), "\n  -"+o.Name+"\n")
			if listed && !o.For(c.cmd) && !ownFlags[c.name][o.Name] {
				t.Errorf("%s --help lists -%s, which the table does not give it", c.name, o.Name)
			}
		}
	}
}

// readmeTables are the first cells of the rows of README's tables, each
// table's rows in one slice.
func readmeTables(t *testing.T) [][]string {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var tables [][]string
	var cur []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			if cur != nil {
				tables = append(tables, cur)
				cur = nil
			}
			continue
		}
		cell, _, _ := strings.Cut(strings.ReplaceAll(line[1:], `\|`, "/"), "|")
		cur = append(cur, cell)
	}
	return tables
}

var flagInCell = regexp.MustCompile("`--([a-z0-9-]+)")

func TestREADMEsOptionTablesListEveryMountOptionAndNoOther(t *testing.T) {
	documented := map[string]bool{}
	var mountTable []string
	for _, tab := range readmeTables(t) {
		for _, cell := range tab {
			for _, m := range flagInCell.FindAllStringSubmatch(cell, -1) {
				documented[m[1]] = true
				if m[1] == "strategy" && strings.HasPrefix(strings.TrimSpace(cell), "`--strategy`") {
					mountTable = tab
				}
			}
		}
	}
	for _, o := range mount.Options() {
		if o.For(mount.CmdMount) && !documented[o.Name] {
			t.Errorf("README has no table row for the mount option --%s", o.Name)
		}
	}
	if mountTable == nil {
		t.Fatal("README has no table of mount options (a row starting with `--strategy`)")
	}
	fset, _ := newMountFlagSet(io.Discard)
	for _, cell := range mountTable {
		for _, m := range flagInCell.FindAllStringSubmatch(cell, -1) {
			if fset.Lookup(m[1]) == nil {
				t.Errorf("README's table of mount options lists --%s, which corgifs mount does not take", m[1])
			}
		}
	}
}

func TestMountHelperTakesEveryMountOptionAndKnowsItsBooleansFromTheTable(t *testing.T) {
	for _, o := range mount.Options() {
		if !o.For(mount.CmdMount) {
			continue
		}
		opt := strings.ReplaceAll(o.Name, "-", "_")
		got, _, err := helperArgs([]string{"/src", "/mnt", "-o", opt + "=1"})
		if err != nil || !slices.Contains(got, "--"+o.Name+"=1") {
			t.Errorf("-o %s=1: %q, %v; want --%s=1", opt, got, err, o.Name)
		}
		_, _, err = helperArgs([]string{"/src", "/mnt", "-o", opt})
		if o.Kind == mount.KindBool && err != nil {
			t.Errorf("-o %s, a boolean: %v", opt, err)
		}
		if o.Kind != mount.KindBool && (err == nil || !strings.Contains(err.Error(), "needs a value")) {
			t.Errorf("-o %s without a value: %v; want it to say it needs one", opt, err)
		}
	}
}
