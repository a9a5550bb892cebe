package portability

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// listedPackage is the part of `go list -json` that typeCheckFor reads.
type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	ImportMap  map[string]string
	Standard   bool
	DepOnly    bool
	Module     *struct{ GoVersion string }
	Error      *struct{ Err string }
}

// typeCheckFor type-checks patterns, and everything they import, as the go
// command would select their files for goos/goarch with cgo off: `go list
// -deps` picks the files (build tags, _GOOS.go suffixes) and go/types checks
// them from source. This is the part of a cross-compile that can fail for a
// Linux-only call (an undefined name, a wrong type, a package with no file
// for that system) without the code generation of the standard library for
// each system, which made a cold cross-compile cost minutes of CPU. The
// standard library is checked without its function bodies: only its API is
// needed, and it is known to build.
func typeCheckFor(t *testing.T, goBin, dir, goos, goarch string, patterns []string) error {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), goBin, append([]string{"list", "-e", "-deps", "-json=ImportPath,Dir,GoFiles,ImportMap,Standard,DepOnly,Module,Error"}, patterns...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -deps %s: %w\n%s", strings.Join(patterns, " "), err, stderr.Bytes())
	}
	sizes := types.SizesFor("gc", goarch)
	if sizes == nil {
		return fmt.Errorf("go/types has no sizes for GOARCH=%s", goarch)
	}
	fset := token.NewFileSet()
	checked := map[string]*types.Package{"unsafe": types.Unsafe}
	var errs []error
	// go list -deps prints each package after the packages it imports.
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("reading go list -json: %w", err)
		}
		if p.ImportPath == "unsafe" {
			continue
		}
		if p.Error != nil {
			errs = append(errs, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err))
			continue
		}
		files := make([]*ast.File, 0, len(p.GoFiles))
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files = append(files, f)
		}
		conf := types.Config{
			Sizes:            sizes,
			IgnoreFuncBodies: p.Standard,
			Importer: importerFunc(func(path string) (*types.Package, error) {
				if mapped, ok := p.ImportMap[path]; ok {
					path = mapped
				}
				if pkg, ok := checked[path]; ok {
					return pkg, nil
				}
				return nil, fmt.Errorf("%s imports %s, which was not checked before it (it failed, or go list left it out)", p.ImportPath, path)
			}),
		}
		if p.Module != nil && p.Module.GoVersion != "" {
			conf.GoVersion = "go" + p.Module.GoVersion
		}
		pkg, err := conf.Check(p.ImportPath, fset, files, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.ImportPath, err))
			continue
		}
		checked[p.ImportPath] = pkg
	}
	return errors.Join(errs...)
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// TestTypeCheckCatchesALinuxOnlyCall shows that typeCheckFor fails where a
// cross-compile would: a package calling syscall.Fallocate, which only Linux
// has, checks on linux and fails on darwin and windows.
func TestTypeCheckCatchesALinuxOnlyCall(t *testing.T) {
	goBin := goTool(t)
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":  "module example.com/linuxonly\n\ngo 1.22\n",
		"p/p.go":  "package p\n\nimport \"syscall\"\n\n// Reserve needs a system call only Linux has.\nfunc Reserve(fd int) error { return syscall.Fallocate(fd, 0, 0, 1) }\n",
		"p/ok.go": "package p\n\n// Portable is fine everywhere.\nfunc Portable() int { return 1 }\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := typeCheckFor(t, goBin, dir, "linux", "amd64", []string{"./p"}); err != nil {
		t.Fatalf("linux/amd64: %v", err)
	}
	for _, goos := range []string{"darwin", "windows"} {
		err := typeCheckFor(t, goBin, dir, goos, "amd64", []string{"./p"})
		if err == nil || !strings.Contains(err.Error(), "Fallocate") {
			t.Errorf("%s/amd64: syscall.Fallocate passed the check (error %v); it must fail", goos, err)
		}
	}
}
