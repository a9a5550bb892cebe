package diskcache

import (
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corgifs/corgifs/internal/blocktest"
)

// Blocks offered all at once, many more bytes than the write queue holds,
// are all written: an offer waits for room rather than leaving its block
// uncached (issue 25: a burst of GETs finishing together lost blocks).
func TestDiskCacheWritesEveryBlockOfABurstLargerThanItsWriteQueue(t *testing.T) {
	f := newDiskFixture(t)
	var log blocktest.LockedBuffer
	dc, err := Open(f.ix, Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30, MaxQueued: 1,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	var wg sync.WaitGroup
	for id, b := range f.ix.Blocks {
		wg.Go(func() {
			e := Extent{File: b.File, Block: int32(id), Off: b.Offset, Len: b.Len}
			dc.offer(e, 0, f.bytes(b))
		})
	}
	wg.Wait()
	n := int64(len(f.ix.Blocks))
	blocktest.Eventually(t, "every block is written", func() bool { return dc.Stats().Written == n })
	if s := dc.Stats(); s.WriteSkipped != 0 || s.Entries != int(n) {
		t.Fatalf("%d blocks offered at once: %+v; want all written, none skipped", n, s)
	}
}

// A queue that stays full past MaxWait (a disk slower than the source)
// leaves the block uncached, counts it and logs why, once.
func TestDiskCacheSkipsABlockWhoseWaitForTheQueueRunsOutAndLogsWhyOnce(t *testing.T) {
	f := newDiskFixture(t)
	var log blocktest.LockedBuffer
	dc, err := Open(f.ix, Options{Dir: filepath.Join(t.TempDir(), "dc"), MaxBytes: 1 << 30, MaxQueued: 1,
		MaxWait: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	// The writers held up: the queue never empties.
	dc.mu.Lock()
	dc.queue.queued = 1 << 40
	dc.mu.Unlock()
	for id, b := range f.ix.Blocks[:2] {
		dc.offer(Extent{File: b.File, Block: int32(id), Off: b.Offset, Len: b.Len}, 0, f.bytes(b))
	}
	dc.mu.Lock()
	dc.queue.queued = 0
	dc.mu.Unlock()
	s := dc.Stats()
	if s.WriteSkipped != 2 || s.WriteWaitSeconds <= 0 {
		t.Fatalf("two blocks offered to a queue full for longer than MaxWait: %+v; want both skipped, the wait counted", s)
	}
	if got := strings.Count(log.String(), "was not cached"); got != 1 || !strings.Contains(log.String(), "slower than the source") {
		t.Fatalf("want one log line saying why a block was not cached, got %d:\n%s", got, log.String())
	}
}
