package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/corgifstest"
)

// raceTests are the tests whose daemon is built with the race detector
// when the tests run with -race: those whose point is concurrency inside
// the daemon (many readers at once, readers waiting on a short budget,
// signals mid-read, a source dying under concurrent reads). Every other
// test runs a plain build of the daemon, which serves several times faster
// (the suite took 3.8 times as long with a race daemon everywhere); the
// daemon's packages run their own unit tests under -race.
var raceTests = map[string]bool{
	"TestConcurrentReadersUnderAShortBudgetTakeTurnsWithoutRereading":    true,
	"TestConcurrentReadersOfDifferentPartsAndEpochs":                     true,
	"TestManyConcurrentReadersStayWithinMaxMemoryPlus64MiB":              true,
	"TestLoadManyReadersAndFioServeExactBytesWithinMemoryWithoutLeaks":   true,
	"TestMemoryPressureMakesReadersWaitAndServesExactBytes":              true,
	"TestEpochMemoryBytesCountTheBytesASecondReaderFoundLoaded":          true,
	"TestSignalWithManyReadersMidReadExitsZeroAndFreesMountpoint":        true,
	"TestSigtermWhileReadingExitsCleanly":                                true,
	"TestS3ServerKilledMidEpochGivesEIOAndTheMountRecoversWhenItIsBack":  true,
	"TestFeedbackOrdersThroughAMountFollowTheFeedbackAndSurviveARemount": true,
	"TestDeepPrefetchLoadsFurtherAheadWithinMaxMemory":                   true,
}

// daemonRace reports whether t's daemon is a race-detector build: the
// tests run with -race and t (or the test it is a subtest of) is in
// raceTests.
func daemonRace(t testing.TB) bool {
	top, _, _ := strings.Cut(t.Name(), "/")
	return raceEnabled && raceTests[top]
}

// binFor returns the corgifs binary for t's daemons: a race-detector
// build for the tests in raceTests (when the tests run with -race), bin
// otherwise. Tests that start `corgifs mount` themselves run this.
func binFor(t testing.TB) string {
	t.Helper()
	if !daemonRace(t) {
		return bin
	}
	b, err := corgifstest.RaceBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRaceSetNamesTestsOfThisPackage keeps raceTests in step with the
// tests: a renamed test would silently lose its race-detector daemon.
func TestRaceSetNamesTestsOfThisPackage(t *testing.T) {
	names, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	fset := token.NewFileSet()
	for _, n := range names {
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				have[fn.Name.Name] = true
			}
		}
	}
	for name := range raceTests {
		if !have[name] {
			t.Errorf("raceTests names %s, which is no test of this package: rename it there too", name)
		}
	}
}
