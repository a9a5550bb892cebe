//go:build race

package tests

// raceEnabled says the tests run with -race, and so does the daemon:
// corgifstest builds it with -race too (its own raceEnabled).
const raceEnabled = true
