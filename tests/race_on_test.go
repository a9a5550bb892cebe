//go:build race

package tests

// raceEnabled makes the daemon under test a race-detector build too when the
// tests run with -race.
const raceEnabled = true
