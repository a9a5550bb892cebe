// Command release builds the release artifacts of corgifs into -out: for
// linux/amd64 and linux/arm64, static binaries (CGO_ENABLED=0) of corgifs
// and corgifs-plot in a .tar.gz with the license, README, changelog and
// the systemd examples, a Debian package of each, an OCI image of each
// (corgifs and the CSI driver corgifs-csi, no base image), and SHA256SUMS.
//
// The builds are reproducible: the same source, Go toolchain and
// SOURCE_DATE_EPOCH give the same bytes, wherever the tree is and whoever
// builds it (-trimpath, an empty -buildid, no vcs stamping by the go
// command, the commit stamped explicitly, archive entries with fixed
// times, owners and order).
//
// It is a module of its own so that the packager's dependencies (nfpm and
// what it pulls in) stay out of corgifs's go.mod: nothing that corgifs
// builds or tests depends on them.
//
// Usage, from the repository root:
//
//	make release                 # or: cd release && go run . -out ../dist
package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corgifs/corgifs"
)

// binaries are the commands a release ships, by package path.
var binaries = []string{"corgifs", "corgifs-plot"}

// config is what one run builds.
type config struct {
	root    string    // the repository root
	out     string    // where the artifacts go
	version string    // without a leading v
	commit  string    // stamped into corgifs --version
	date    time.Time // SOURCE_DATE_EPOCH: every time stamp in the archives and packages
	arches  []string
	deb     bool
	image   bool
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), os.Args[1:], log); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	fset := flag.NewFlagSet("release", flag.ContinueOnError)
	root := fset.String("root", "..", "the corgifs repository `dir`ectory")
	out := fset.String("out", "../dist", "`dir`ectory for the artifacts (created)")
	version := fset.String("version", corgifs.Version, "release version (default: corgifs.Version in version.go)")
	commit := fset.String("commit", "", "commit stamped into --version (default: git rev-parse HEAD in -root)")
	arches := fset.String("arch", "amd64,arm64", "comma-separated linux architectures")
	deb := fset.Bool("deb", true, "also build a Debian package per architecture")
	image := fset.Bool("image", true, "also build an OCI image per architecture (NAME.oci.tar: podman load -i, skopeo copy oci-archive:)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	c := config{root: *root, out: *out, version: strings.TrimPrefix(*version, "v"), commit: *commit, arches: strings.Split(*arches, ","), deb: *deb, image: *image}
	var err error
	if c.root, err = filepath.Abs(c.root); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.root, "cmd", "corgifs")); err != nil {
		return fmt.Errorf("-root %s is not the corgifs repository (no cmd/corgifs): %w", c.root, err)
	}
	if c.commit == "" {
		if c.commit, err = git(ctx, c.root, "rev-parse", "HEAD"); err != nil {
			return fmt.Errorf("finding the commit (pass -commit): %w", err)
		}
	}
	if c.date, err = sourceDate(ctx, c.root); err != nil {
		return err
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	var artifacts []string
	for _, arch := range c.arches {
		dir, err := buildArch(ctx, c, arch, log)
		if err != nil {
			return err
		}
		tgz, err := archive(c, arch, dir)
		if err != nil {
			return err
		}
		artifacts = append(artifacts, tgz)
		log.Info("built", "artifact", tgz)
		if c.deb {
			deb, err := buildDeb(ctx, c, arch, dir)
			if err != nil {
				return err
			}
			artifacts = append(artifacts, deb)
			log.Info("built", "artifact", deb)
		}
		if c.image {
			img, err := buildImage(ctx, c, arch, dir, log)
			if err != nil {
				return err
			}
			artifacts = append(artifacts, img)
			log.Info("built", "artifact", img)
		}
	}
	return writeSums(c.out, artifacts)
}

// sourceDate is SOURCE_DATE_EPOCH (reproducible-builds.org), else the time
// of the commit, so that two builds of one commit agree without it.
func sourceDate(ctx context.Context, root string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, fmt.Errorf("no SOURCE_DATE_EPOCH and no commit time: %w", err)
		}
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// name is the base name of the artifacts of arch, Debian's style.
func (c config) name(arch string) string {
	return fmt.Sprintf("corgifs_%s_linux_%s", c.version, arch)
}

// buildArch builds the binaries for linux/arch into out/NAME/ and returns
// that directory.
func buildArch(ctx context.Context, c config, arch string, log *slog.Logger) (string, error) {
	dir := filepath.Join(c.out, c.name(arch))
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ldflags := fmt.Sprintf("-s -w -buildid= -X main.commit=%s -X github.com/corgifs/corgifs.Version=%s", c.commit, c.version)
	for _, b := range binaries {
		outPath, err := filepath.Abs(filepath.Join(dir, b))
		if err != nil {
			return "", err
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", outPath, "./cmd/"+b)
		cmd.Dir = c.root
		// CGO off: a static binary that runs on any Linux of the
		// architecture, whatever its C library; GOFLAGS from the
		// environment could add flags that change the bytes.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=", "GOAMD64=v1", "GOARM64=v8.0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		log.Info("go build", "binary", b, "arch", arch)
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("go build ./cmd/%s for linux/%s: %w", b, arch, err)
		}
	}
	for _, f := range []string{"LICENSE", "README.md", "CHANGELOG.md"} {
		if err := copyFile(filepath.Join(c.root, f), filepath.Join(dir, f), 0o644); err != nil {
			return "", err
		}
	}
	units, err := filepath.Glob(filepath.Join(c.root, "examples", "systemd", "*"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, "systemd"), 0o755); err != nil {
		return "", err
	}
	for _, u := range units {
		if err := copyFile(u, filepath.Join(dir, "systemd", filepath.Base(u)), 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func copyFile(from, to string, mode fs.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, mode)
}

// archive writes NAME.tar.gz of dir with every entry's time the source
// date, owner root and names in sorted order, and returns its path.
func archive(c config, arch, dir string) (path string, err error) {
	path = filepath.Join(c.out, c.name(arch)+".tar.gz")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	// The gzip header has no name and a zero time, so that it depends
	// on the bytes alone.
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(zw)
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.Sort(files)
	base := filepath.Dir(dir)
	for _, p := range files {
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return "", err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: c.date, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case fi.Mode()&0o111 != 0:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o755, fi.Size()
		default:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return "", err
		}
		if h.Typeflag == tar.TypeReg {
			if err := copyInto(tw, p); err != nil {
				return "", err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return path, nil
}

func copyInto(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// writeSums writes SHA256SUMS of the artifacts, in sha256sum's format.
func writeSums(out string, artifacts []string) error {
	var b strings.Builder
	for _, a := range artifacts {
		data, err := os.ReadFile(a)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", sha256.Sum256(data), filepath.Base(a))
	}
	return os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(b.String()), 0o644)
}
