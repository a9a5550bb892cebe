//go:build race

package tests

// raceEnabled says the tests run with -race; so does the daemon of the
// tests in raceTests (see daemonRace).
const raceEnabled = true
