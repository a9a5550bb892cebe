package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// genCache makes each dataset of `corgifs gen` once per test binary: the
// tests ask for the same few parameter sets over a hundred times. The first
// call with a set of arguments runs gen into a directory of the cache; every
// call, the first included, gets its own copy of it, so that a test may
// change its source (append, replace, delete files) without touching
// another's. gen is deterministic for given arguments (its --seed), so a
// copy holds the bytes a run of its own would have written.
type genCache struct {
	dir string

	mu   sync.Mutex
	runs map[string]*genRun // by the arguments less the output directory
}

// A genRun is one run of gen into the cache, made once.
type genRun struct {
	once sync.Once
	dir  string // the dataset in the cache
	out  string // gen's stdout
	err  error
}

// gens is the cache of this test binary, set up by runTests.
var gens *genCache

func newGenCache() (*genCache, error) {
	dir, err := os.MkdirTemp("", "corgifs-tests-gen-")
	if err != nil {
		return nil, fmt.Errorf("dataset cache: %w", err)
	}
	return &genCache{dir: dir, runs: map[string]*genRun{}}, nil
}

func (c *genCache) remove() { os.RemoveAll(c.dir) }

// cacheable reports whether `corgifs args...` is a gen the cache can
// stand in for: into a new (or empty) directory, without --force.
func cacheable(args []string) bool {
	if gens == nil || len(args) < 3 || args[0] != "gen" || slices.Contains(args, "--force") {
		return false
	}
	entries, err := os.ReadDir(args[2])
	return errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0)
}

// gen runs `corgifs gen KIND DIR flags...` (args) through the cache: it
// makes DIR a copy of the dataset the same arguments made, making it first
// if no test has, and returns gen's stdout.
func (c *genCache) gen(t testing.TB, args []string) string {
	t.Helper()
	key := strings.Join(slices.Concat(args[:2], args[3:]), "\x00")
	c.mu.Lock()
	r := c.runs[key]
	if r == nil {
		r = &genRun{dir: filepath.Join(c.dir, fmt.Sprint(len(c.runs)))}
		c.runs[key] = r
	}
	c.mu.Unlock()
	r.once.Do(func() {
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, slices.Concat(args[:2], []string{r.dir}, args[3:])...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			r.err = fmt.Errorf("%v\n%s", err, errb.String())
		}
		r.out = out.String()
	})
	if r.err != nil {
		t.Fatalf("corgifs %s: %v", strings.Join(args, " "), r.err)
	}
	if err := copyTree(r.dir, args[2]); err != nil {
		t.Fatalf("copy the dataset of corgifs %s from the cache: %v", strings.Join(args, " "), err)
	}
	return strings.ReplaceAll(r.out, r.dir, args[2])
}

// copyTree copies the directories and regular files under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFile(path, to, info.Mode().Perm())
		default:
			return fmt.Errorf("%s: neither a directory nor a regular file", path)
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
