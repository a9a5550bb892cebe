//go:build !race

package corgifstest

const raceEnabled = false
