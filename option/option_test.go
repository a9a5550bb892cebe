package option

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestRenderWritesPlaceholdersAsFlagsAndLeavesOtherBraces(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"raise {max-memory}", "raise --max-memory"},
		{"{index} full", "--index full"},
		{"pass {compression} none; ({coordinate-rank} 1)", "pass --compression none; (--coordinate-rank 1)"},
		{"pass {header}=false", "pass --header=false"},
		{"use at least {max-memory} 64.", "use at least --max-memory 64."},
		{`{"a": 1} and {} and {x y} and {Max} and {1st} and {`, `{"a": 1} and {} and {x y} and {Max} and {1st} and {`},
		{"/data/{train}/x and file{a}.bin and a-{b}", "/data/{train}/x and file{a}.bin and a-{b}"},
		{`"{include}" {a}{b}`, `"--include" --a--b`},
		{"no braces", "no braces"},
		{"", ""},
	} {
		if got := Render(tc.in, "--"); got != tc.want {
			t.Errorf("Render(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Render("{cache-dir} is empty", ""); got != "cache-dir is empty" {
		t.Errorf("Render with no prefix = %q, want the bare name", got)
	}
}

func TestErrorKeepsPlaceholdersAndItsCause(t *testing.T) {
	cause := errors.New("permission denied")
	err := fmt.Errorf("mount: %w", Errorf("coordinate", "{coordinate} /shared: %w", cause))
	var e *Error
	if !errors.As(err, &e) || e.Option != "coordinate" || !errors.Is(err, cause) {
		t.Fatalf("err = %#v, want an *Error of coordinate wrapping the cause", err)
	}
	if got, want := err.Error(), "mount: {coordinate} /shared: permission denied"; got != want {
		t.Errorf("Error() = %q, want %q (placeholders survive wrapping)", got, want)
	}
	if got, want := Render(err.Error(), "--"), "mount: --coordinate /shared: permission denied"; got != want {
		t.Errorf("rendered %q, want %q", got, want)
	}
	if got, want := e.Text("-o "), "-o coordinate /shared: permission denied"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

// libraries are the packages below the CLI: they name options as
// {placeholders}, never as the CLI's --flags.
var libraries = []string{"api", "blockcache", "diskcache", "feedback", "formats", "fs", "grab", "index",
	"internal", "shuffler", "sizing", "source", "tune", "validator", "zaccess", "mount/serve.go", "mount/open.go"}

// flagExceptions are the texts in string literals that may name a flag,
// by file, with the reason; the rest of such a literal is checked.
var flagExceptions = []struct{ file, text, why string }{
	// zstd's own flag, not one of corgifs.
	{"zaccess/zstd.go", "zstd --long", "a flag of the zstd command"},
	{"zaccess/zstd.go", "without --long, or with --long=", "a flag of the zstd command"},
	// The AWS CLI's login command, not a flag of corgifs.
	{"source/s3/credentials.go", "aws sso login --profile ", "a flag of the aws command"},
	// tune writes the command line to run, in tune's JSON too: the
	// CLI's syntax is what the line is.
	{"tune/advice.go", "corgifs mount %s MNT --block-size", "the mount command line tune advises"},
	{"tune/advice.go", " --parts %d", "the mount command line tune advises"},
	{"tune/advice.go", " --buffer %g%%", "the mount command line tune advises"},
	{"tune/advice.go", " --max-memory ", "the mount command line tune advises"},
	{"tune/advise.go", " --s3-concurrency %d", "the mount command line tune advises"},
	{"tune/advise.go", " --s3-endpoint ", "the mount command line tune advises"},
}

var flagInText = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])--[a-z][a-z0-9-]*`)

func TestLibrariesNameOptionsAsPlaceholdersNotFlags(t *testing.T) {
	root := filepath.Join("..")
	used := make([]bool, len(flagExceptions))
	for _, lib := range libraries {
		err := filepath.WalkDir(filepath.Join(root, lib), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
			ast.Inspect(f, func(n ast.Node) bool {
				l, ok := n.(*ast.BasicLit)
				if !ok || l.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(l.Value)
				if err != nil || !flagInText.MatchString(s) {
					return true
				}
				for i, x := range flagExceptions {
					if x.file == rel && strings.Contains(s, x.text) {
						used[i] = true
						s = strings.ReplaceAll(s, x.text, "")
					}
				}
				if !flagInText.MatchString(s) {
					return true
				}
				t.Errorf("%s: %q names a flag: write {name}, which the CLI renders as --name (package option)", fset.Position(l.Pos()), s)
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, x := range flagExceptions {
		if !used[i] {
			t.Errorf("exception %s %q (%s) matches no literal any more: remove it", x.file, x.text, x.why)
		}
	}
}
