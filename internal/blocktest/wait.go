package blocktest

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// LockedBuffer is a log sink that goroutines of the code under test (the
// disk cache's writers) may write to while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Eventually waits until cond holds, for at most 10 seconds, and fails
// the test saying what it waited for if it never does: work done in the
// background (a disk cache's writes) is seen only once done.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}
