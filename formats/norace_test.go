//go:build !race

package formats

// raceDetector reports whether the tests run under the race detector,
// whose sync.Pool drops items at random, so that counts of allocations
// mean nothing.
const raceDetector = false
