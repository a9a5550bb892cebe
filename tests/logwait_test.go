package tests

import (
	"strings"
	"time"
)

// logLimit bounds how long a test waits for a daemon's log line.
const logLimit = 10 * time.Second

// awaitLog polls log (what a daemon has logged so far) until ok holds of
// it or logLimit passes, and returns the log then and whether ok held.
// A daemon's lines reach the test through a pipe that a goroutine copies,
// so the event a line reports (an EIO, a mount in the mount table, a
// reply) can reach the test before the line does: a test that asserts on
// a line never reads the log just once.
func awaitLog(log func() string, ok func(string) bool) (string, bool) {
	deadline := time.Now().Add(logLimit)
	for {
		s := log()
		if ok(s) {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hasAll says whether a log holds every one of subs.
func hasAll(subs ...string) func(string) bool {
	return func(log string) bool {
		for _, s := range subs {
			if !strings.Contains(log, s) {
				return false
			}
		}
		return true
	}
}

// logHas waits until the daemon's log holds every one of subs, and
// returns it (see awaitLog).
func (m *mount) logHas(subs ...string) (string, bool) {
	return awaitLog(m.log.String, hasAll(subs...))
}

// logCount waits until s occurs n times or more in the daemon's log, and
// returns how many times it does then, for a test that wants exactly n.
func (m *mount) logCount(s string, n int) int {
	log, _ := awaitLog(m.log.String, func(log string) bool { return strings.Count(log, s) >= n })
	return strings.Count(log, s)
}
