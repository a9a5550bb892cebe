//go:build !race

package validator

// raceDetector reports whether the tests run under the race detector, which
// slows the numeric loops of training about tenfold.
const raceDetector = false
