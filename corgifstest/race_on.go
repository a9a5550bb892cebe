//go:build race

package corgifstest

// raceEnabled lets RaceBinary build the daemon with -race when the tests
// run with -race, so that a data race in a mount fails the test that found
// it.
const raceEnabled = true
