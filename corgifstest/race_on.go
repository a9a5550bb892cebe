//go:build race

package corgifstest

// raceEnabled makes the daemon a race-detector build too when the tests run
// with -race, so that a data race in a mount fails the test that found it.
const raceEnabled = true
