package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
)

const (
	maintainer = "corgifs maintainers <corgifs@users.noreply.github.com>"
	homepage   = "https://github.com/corgifs/corgifs"
	// The helper mount(8) runs for -t fuse.corgifs and fstab lines
	// (/sbin is /usr/sbin on a merged-/usr system, Debian 12 and later).
	helperPath = "/usr/sbin/mount.fuse.corgifs"
)

const description = `shuffled training data from a read-only FUSE file system
 corgifs mounts a directory of record files (TFRecord, CSV, JSONL, LIBSVM,
 text lines, WebDataset tar, .npy, fixed-size records) or an S3 prefix and
 serves every training epoch as part files whose records come in a
 CorgiPile order: random large blocks, shuffled inside a memory buffer.
 Readers get a well-shuffled order while the storage sees only large
 sequential reads, and no shuffled copy of the data is written.
 .
 The package holds the corgifs command, the mount.fuse.corgifs helper for
 mount -t fuse.corgifs and /etc/fstab, corgifs-plot (plots of corgifs
 validate), manual pages and example systemd units.`

// buildDeb writes the Debian package of arch from the binaries in dir
// (buildArch) and returns its path.
func buildDeb(ctx context.Context, c config, arch, dir string) (string, error) {
	stage := filepath.Join(dir, "deb")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return "", err
	}
	staged := map[string][]byte{}
	var err error
	// Manual pages from the binaries' --help: of the host's
	// architecture, since arm64's cannot run here; the text is the same.
	if staged["corgifs.1.gz"], err = manPage(ctx, c, "corgifs", 1); err != nil {
		return "", err
	}
	if staged["corgifs-plot.1.gz"], err = manPage(ctx, c, "corgifs-plot", 1); err != nil {
		return "", err
	}
	if staged["mount.fuse.corgifs.8.gz"], err = manPage(ctx, c, "mount.fuse.corgifs", 8); err != nil {
		return "", err
	}
	if staged["changelog.gz"], err = gzipFile(filepath.Join(c.root, "CHANGELOG.md")); err != nil {
		return "", err
	}
	staged["changelog.Debian.gz"] = gzipBytes([]byte(debianChangelog(c)))
	staged["copyright"] = []byte(copyright(c))
	staged["lintian-overrides"] = []byte(lintianOverrides)
	for name, b := range staged {
		if err := os.WriteFile(filepath.Join(stage, name), b, 0o644); err != nil {
			return "", err
		}
	}
	// The examples name the binary where the package puts it.
	units, err := filepath.Glob(filepath.Join(dir, "systemd", "*"))
	if err != nil {
		return "", err
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			return "", err
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/corgifs"), []byte("/usr/bin/corgifs"))
		if err := os.WriteFile(filepath.Join(stage, filepath.Base(u)), b, 0o644); err != nil {
			return "", err
		}
	}

	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst, Type: files.TypeFile,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: c.date}}
	}
	doc := "/usr/share/doc/corgifs/"
	contents := files.Contents{
		file(filepath.Join(dir, "corgifs"), "/usr/bin/corgifs", 0o755),
		file(filepath.Join(dir, "corgifs-plot"), "/usr/bin/corgifs-plot", 0o755),
		{Source: "../bin/corgifs", Destination: helperPath, Type: files.TypeSymlink},
		file(filepath.Join(stage, "corgifs.1.gz"), "/usr/share/man/man1/corgifs.1.gz", 0o644),
		file(filepath.Join(stage, "corgifs-plot.1.gz"), "/usr/share/man/man1/corgifs-plot.1.gz", 0o644),
		file(filepath.Join(stage, "mount.fuse.corgifs.8.gz"), "/usr/share/man/man8/mount.fuse.corgifs.8.gz", 0o644),
		file(filepath.Join(stage, "copyright"), doc+"copyright", 0o644),
		file(filepath.Join(stage, "changelog.gz"), doc+"changelog.gz", 0o644),
		file(filepath.Join(stage, "changelog.Debian.gz"), doc+"changelog.Debian.gz", 0o644),
		file(filepath.Join(stage, "lintian-overrides"), "/usr/share/lintian/overrides/corgifs", 0o644),
	}
	for _, u := range units {
		contents = append(contents, file(filepath.Join(stage, filepath.Base(u)), doc+"examples/systemd/"+filepath.Base(u), 0o644))
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:        "corgifs",
		Arch:        arch,
		Platform:    "linux",
		Version:     c.version,
		Release:     "1",
		Section:     "utils",
		Priority:    "optional",
		Maintainer:  maintainer,
		Description: description,
		Homepage:    homepage,
		License:     "Apache-2.0",
		MTime:       c.date,
		Overridables: nfpm.Overridables{
			// fusermount3 unmounts for non-root users and is what
			// go-fuse mounts through when not root.
			Depends:  []string{"fuse3"},
			Contents: contents,
			Deb:      nfpm.Deb{Compression: "xz"},
		},
	})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("deb for %s: %w", arch, err)
	}
	pkg, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.out, pkg.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("deb for %s: %w", arch, err)
	}
	return path, f.Close()
}

// manPage returns the gzipped manual page of prog in section, made from
// the --help of the host's build of corgifs: the usage and, for
// corgifs, every command's help.
func manPage(ctx context.Context, c config, prog string, section int) ([]byte, error) {
	bin, err := hostBinary(ctx, c)
	if err != nil {
		return nil, err
	}
	help := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("corgifs %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	var b strings.Builder
	upper := strings.ToUpper(prog)
	fmt.Fprintf(&b, ".TH %s %d \"%s\" \"corgifs %s\" \"corgifs manual\"\n", upper, section, c.date.Format("2006-01-02"), c.version)
	switch prog {
	case "corgifs":
		usage, err := help("--help")
		if err != nil {
			return nil, err
		}
		b.WriteString(".SH NAME\ncorgifs \\- serve training data in shuffled epochs from a FUSE mount\n")
		b.WriteString(".SH SYNOPSIS\n.B corgifs\n.I COMMAND\n[\\fIflags\\fR] [\\fIargs\\fR]\n")
		b.WriteString(".SH DESCRIPTION\n")
		verbatim(&b, usage)
		b.WriteString(".SH COMMANDS\n")
		for _, cmdName := range commandNames(usage) {
			text, err := help(cmdName, "--help")
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, ".SS %s\n", cmdName)
			verbatim(&b, text)
		}
		b.WriteString(".SH SEE ALSO\n.BR corgifs-plot (1),\n.BR mount.fuse.corgifs (8),\n.BR mount (8),\n.BR fstab (5)\n")
	case "mount.fuse.corgifs":
		text, err := help("mount-helper", "--help")
		if err != nil {
			return nil, err
		}
		b.WriteString(".SH NAME\nmount.fuse.corgifs \\- mount(8) helper for corgifs file systems\n")
		b.WriteString(".SH SYNOPSIS\n.B mount.fuse.corgifs\n.I SRC MNT\n[\\fB\\-o\\fR \\fIname=value,...\\fR]\n")
		b.WriteString(".SH DESCRIPTION\n")
		verbatim(&b, text)
		b.WriteString(".SH SEE ALSO\n.BR corgifs (1),\n.BR mount (8),\n.BR fstab (5)\n")
	case "corgifs-plot":
		plot := filepath.Join(filepath.Dir(bin), "corgifs-plot")
		out, _ := exec.CommandContext(ctx, plot, "--help").CombinedOutput()
		b.WriteString(".SH NAME\ncorgifs-plot \\- draw the reports of corgifs validate and corgifs herding\n")
		b.WriteString(".SH SYNOPSIS\n.B corgifs-plot\n.I validate|herding\n[\\fIflags\\fR] \\fIREPORT.json OUT.svg|OUT.png\\fR\n")
		b.WriteString(".SH DESCRIPTION\n")
		verbatim(&b, string(out))
		b.WriteString(".SH SEE ALSO\n.BR corgifs (1)\n")
	}
	return gzipBytes([]byte(b.String())), nil
}

// commandNames returns the commands the usage lists, the first word of
// each indented line after "Commands:".
func commandNames(usage string) []string {
	var names []string
	in := false
	for line := range strings.Lines(usage) {
		switch {
		case strings.HasPrefix(line, "Commands:"):
			in = true
		case in && strings.HasPrefix(line, "  "):
			names = append(names, strings.Fields(line)[0])
		case in && strings.TrimSpace(line) == "":
			in = false
		}
	}
	return names
}

// verbatim writes text as a no-fill block, escaped for roff.
func verbatim(b *strings.Builder, text string) {
	b.WriteString(".nf\n")
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\n")
		line = strings.ReplaceAll(line, `\`, `\e`)
		line = strings.ReplaceAll(line, "-", `\-`)
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			line = `\&` + line
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(".fi\n")
}

// hostBinary returns a corgifs (with corgifs-plot next to it) that runs
// here: the one built for this machine's architecture.
func hostBinary(ctx context.Context, c config) (string, error) {
	return filepath.Join(c.out, c.name(runtime.GOARCH), "corgifs"), checkHost(c)
}

func checkHost(c config) error {
	p := filepath.Join(c.out, c.name(runtime.GOARCH), "corgifs")
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("the manual pages are made from the --help of the %s build, which is not built yet: list %s first in -arch (%w)", runtime.GOARCH, runtime.GOARCH, err)
	}
	return nil
}

func gzipFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return gzipBytes(b), nil
}

// gzipBytes compresses b as gzip -9n does: no name, no time.
func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// lintianOverrides are the package's exceptions to lintian's checks,
// each with its reason.
const lintianOverrides = `# Static by design: CGO_ENABLED=0 Go binaries that run on any Linux of the
# architecture, whatever its C library.
corgifs: statically-linked-binary [usr/bin/corgifs]
corgifs: statically-linked-binary [usr/bin/corgifs-plot]
# Built by the project's release builder, not uploaded to Debian: no ITP.
corgifs: initial-upload-closes-no-bugs [usr/share/doc/corgifs/changelog.Debian.gz:1]
`

func debianChangelog(c config) string {
	return fmt.Sprintf(`corgifs (%s-1) unstable; urgency=medium

  * Release %s; see /usr/share/doc/corgifs/changelog.gz.

 -- %s  %s
`, c.version, c.version, maintainer, c.date.Format("Mon, 02 Jan 2006 15:04:05 -0700"))
}

func copyright(c config) string {
	return `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: corgifs
Upstream-Contact: ` + maintainer + `
Source: ` + homepage + `

Files: *
Copyright: ` + c.date.Format("2006") + ` The corgifs authors
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License");
 you may not use this file except in compliance with the License.
 You may obtain a copy of the License at
 .
 https://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0
 can be found in "/usr/share/common-licenses/Apache-2.0".
`
}
