package corgifstest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// mainPackage is the corgifs command, built by Binary.
const mainPackage = "github.com/corgifs/corgifs/cmd/corgifs"

// built and builtRace cache the result of the first Binary and RaceBinary
// call of the test binary: one build of each, however many mounts.
var (
	built     = sync.OnceValues(func() (string, error) { return findBinary(false) })
	builtRace = sync.OnceValues(func() (string, error) { return findBinary(true) })
)

// Binary returns the corgifs binary that Mount runs, the same for every
// call of one test binary:
//
//   - $CORGIFS_BIN, if set (a CI job that built corgifs once);
//   - otherwise corgifs built with `go build` from the module the test is
//     built in (so that the daemon is the version of the code under test),
//     without the race detector, even when the test binary has it: a
//     race-detector daemon serves several times slower, and the daemon's
//     packages run their own unit tests under -race (see RaceBinary and
//     RaceDetector for the tests of concurrency through a mount);
//   - otherwise, when there is no go command, corgifs from $PATH.
//
// The build goes to a directory named after the user under os.TempDir(),
// in a file named after the hash of its content, so that test binaries of
// one checkout share it and two checkouts never run each other's binary.
// Builds not used for a week are removed.
func Binary() (string, error) { return built() }

// RaceBinary is Binary built with -race when the test binary has the race
// detector (and Binary itself otherwise), for the tests whose point is
// concurrency inside the daemon: a data race there fails the test that
// found it.
func RaceBinary() (string, error) {
	if !raceEnabled {
		return Binary()
	}
	return builtRace()
}

func findBinary(race bool) (string, error) {
	if bin := os.Getenv("CORGIFS_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("corgifstest: $CORGIFS_BIN: %w", err)
		}
		return bin, nil
	}
	if _, err := exec.LookPath("go"); err != nil {
		bin, perr := exec.LookPath("corgifs")
		if perr != nil {
			return "", errors.New("corgifstest: no go command to build corgifs, and no corgifs on $PATH; set $CORGIFS_BIN")
		}
		return bin, nil
	}
	return build(race)
}

func build(race bool) (string, error) {
	cache := filepath.Join(os.TempDir(), fmt.Sprintf("corgifstest-%d", os.Getuid()))
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return "", fmt.Errorf("corgifstest: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return "", fmt.Errorf("corgifstest: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "corgifs")
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, mainPackage)...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("corgifstest: go build %s: %v\n%s(outside the corgifs module, `go get %s` adds what the build needs, or set $CORGIFS_BIN)",
			mainPackage, err, msg, mainPackage)
	}
	sum, err := hashFile(out)
	if err != nil {
		return "", fmt.Errorf("corgifstest: %w", err)
	}
	bin := filepath.Join(cache, "corgifs-"+sum)
	if _, err := os.Stat(bin); err == nil {
		now := time.Now()
		os.Chtimes(bin, now, now) // used: not pruned
	} else if err := os.Rename(out, bin); err != nil {
		return "", fmt.Errorf("corgifstest: %w", err)
	}
	prune(cache, bin)
	return bin, nil
}

func hashFile(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// prune removes the builds in cache other than keep that were not used
// for a week. A running daemon keeps its removed file open.
func prune(cache, keep string) {
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		p := filepath.Join(cache, e.Name())
		if p == keep || !strings.HasPrefix(e.Name(), "corgifs-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 7*24*time.Hour {
			os.Remove(p)
		}
	}
}
