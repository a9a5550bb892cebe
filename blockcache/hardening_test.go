package blockcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// TestLoaderGetCancelledWhileItsPrefetchFailsIsRaceFree cancels a Get that
// waits on a prefetched Buf whose load then fails (a block damaged in place):
// the Get's Release reads the Buf's error while the load sets it, which the
// race detector must not flag. The load is held back by taking the one read
// slot, given back by a goroutine that shares nothing with the Get, so that
// nothing orders the two but the loader's own locking.
func TestLoaderGetCancelledWhileItsPrefetchFailsIsRaceFree(t *testing.T) {
	f := newLoaderFixture(t)
	src := f.files[1]
	id := int32(slices.IndexFunc(f.ix.Blocks, func(b index.Block) bool { return b.File == 1 && b.Records >= 2 }))
	blk := f.ix.Blocks[id]
	d := slices.Clone(src.Data)
	d[blk.Offset+formats.HeaderLen] ^= 1
	blocktest.WriteBytes(t, src.Path, d)
	blocktest.SetMtime(t, src.Path, f.ix.Files[1].Mtime)

	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20, InFlight: 1})
	l.fetch.sem <- struct{}{}
	go func() {
		time.Sleep(100 * time.Millisecond)
		<-l.fetch.sem
	}()
	l.Prefetch(context.Background(), blockUnit(id))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Get(ctx, blockUnit(id)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled context: %v, want context.Canceled", err)
	}
	blocktest.Eventually(t, "the prefetch fails", func() bool { return l.Stats().LoadErrors == 1 })
	// The failed Buf, held by nobody, is not kept: the next Get reads again.
	if _, err := l.Get(t.Context(), blockUnit(id)); err == nil || !strings.Contains(err.Error(), "CRC") {
		t.Fatalf("Get after the failed prefetch: %v, want the CRC error again", err)
	}
	if s := l.Stats(); s.LoadErrors != 2 {
		t.Fatalf("stats %+v, want a second load", s)
	}
}

// TestLoaderRefusesASourceFileReplacedByANamedPipe replaces an indexed file
// by a named pipe with no writer: opening it for reading would wait for a
// writer forever. The load must fail at once with EIO naming the file, and
// the blocks of the other files must still load.
func TestLoaderRefusesASourceFileReplacedByANamedPipe(t *testing.T) {
	f := newLoaderFixture(t)
	src := f.files[1]
	if err := os.Remove(src.Path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(src.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20, Logger: newTextLogger(&log)})
	id := int32(slices.IndexFunc(f.ix.Blocks, func(b index.Block) bool { return b.File == 1 }))
	done := make(chan error, 1)
	go func() {
		b, err := l.Get(t.Context(), blockUnit(0, id))
		if err == nil {
			l.Release(b)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), src.Path) || !strings.Contains(err.Error(), "named pipe") {
			t.Fatalf("Get of a block of a named pipe: %v, want EIO naming %s as a named pipe", err, src.Path)
		}
		if strings.Contains(err.Error(), "remount") {
			t.Errorf("error %q says to remount, which does not help", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get of a block of a named pipe did not return within 10s")
	}
	if !strings.Contains(log.String(), "not a regular file") || !strings.Contains(log.String(), src.Path) {
		t.Errorf("log does not name the file that is not a regular file:\n%s", log.String())
	}
	other := int32(slices.IndexFunc(f.ix.Blocks, func(b index.Block) bool { return b.File == 2 }))
	l.Release(f.get(t, l, 0, other))
}

// TestLoaderLoadsABufferOfMoreFilesThanTheOpenFileLimit loads one buffer
// holding a record from each of 400 files with the process's open-file
// limit far below 400: files are opened as they are read, a bounded
// number at a time, so the load succeeds, for blocks and for records.
func TestLoaderLoadsABufferOfMoreFilesThanTheOpenFileLimit(t *testing.T) {
	root := t.TempDir()
	r := rand.New(rand.NewPCG(3, 3))
	const n = 400
	var files []*blocktest.SrcFile
	for i := range n {
		files = append(files, blocktest.WriteRecords(t, root, fmt.Sprintf("f%03d.tfrecord", i), blocktest.RandomPayloads(r, 2, 100)))
	}
	f := &loaderFixture{root, files, build(t, root, index.Options{BlockSize: 16 << 10})}
	if len(f.ix.Blocks) != n {
		t.Fatalf("%d blocks, want one per file", len(f.ix.Blocks))
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(len(fds) + 64)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)

	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 4 << 20})
	all := make([]int32, n)
	for i := range all {
		all[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { all[i], all[j] = all[j], all[i] })
	l.Release(f.get(t, l, all...))
	recs := make([]int32, 2*n)
	for i := range recs {
		recs[i] = int32(i)
	}
	r.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	l.Release(f.getUnit(t, l, Unit{Records: recs}))
}

// TestLoaderMinMemoryIsExactlyWhatTheLargestBlockNeeds checks MinMemory
// against Get, with and without direct reads, for a record of 3 MiB that
// starts in the middle of a page: with that budget the block loads, with a
// byte less Get refuses it.
func TestLoaderMinMemoryIsExactlyWhatTheLargestBlockNeeds(t *testing.T) {
	root := t.TempDir()
	r := rand.New(rand.NewPCG(8, 8))
	src := blocktest.WriteRecords(t, root, "a.tfrecord", blocktest.PayloadsOfLen(r, 1000, 1000, 3<<20+5, 1000))
	ix := build(t, root, index.Options{BlockSize: index.MinDirectBlock})
	big := int32(slices.IndexFunc(ix.Blocks, func(b index.Block) bool { return b.Len > index.MinDirectBlock }))
	for _, buffered := range []bool{false, true} {
		o := LoaderOptions{Buffered: buffered}
		need := MinMemory(ix, o, false)
		if want := ix.Blocks[big].Len; buffered && need != want || !buffered && need <= want {
			t.Fatalf("buffered %v: MinMemory %d for a largest block of %d bytes", buffered, need, want)
		}
		o.MaxMemory = need - 1
		if _, err := NewLoader(ix, o).Get(t.Context(), blockUnit(big)); err == nil || !strings.Contains(err.Error(), "does not fit") {
			t.Fatalf("buffered %v: Get with a byte less than MinMemory: %v, want it refused", buffered, err)
		}
		o.MaxMemory = need
		l := NewLoader(ix, o)
		b, err := l.Get(t.Context(), blockUnit(big))
		if err != nil {
			t.Fatalf("buffered %v: Get with MinMemory: %v", buffered, err)
		}
		blk := ix.Blocks[big]
		if len(b.Starts) != int(blk.Records) || !bytes.Equal(b.Data[b.Starts[0]:b.Starts[0]+blk.Len], src.Data[blk.Offset:blk.Offset+blk.Len]) {
			t.Fatalf("buffered %v: the block's records are not the source's", buffered)
		}
		l.Release(b)
	}
	// Single records are packed: the largest frame is all a record needs.
	rec := int32(slices.IndexFunc(ix.Frames, func(n uint32) bool { return n > index.MinDirectBlock }))
	o := LoaderOptions{MaxMemory: MinMemory(ix, LoaderOptions{}, true)}
	if o.MaxMemory != int64(ix.Frames[rec]) {
		t.Fatalf("MinMemory for records %d, want the largest frame, %d", o.MaxMemory, ix.Frames[rec])
	}
	l := NewLoader(ix, o)
	b, err := l.Get(t.Context(), Unit{Records: []int32{rec}})
	if err != nil {
		t.Fatalf("Get of the largest record with MinMemory: %v", err)
	}
	l.Release(b)
}

// TestLoaderGetWaitsForAServedBufferRatherThanEvictingIt fills a budget of
// two buffers with two that users serve (idle between their reads). A
// third user's Get must wait rather than evict either, and proceed once one
// is passed; and a user that stops reading without passing its buffer
// keeps it only for serveGrace, so a waiting Get always proceeds.
func TestLoaderGetWaitsForAServedBufferRatherThanEvictingIt(t *testing.T) {
	f := newLoaderFixture(t)
	ids := f.bySize()
	ia, ib, ic, id := ids[len(ids)-1], ids[len(ids)-2], ids[len(ids)-3], ids[len(ids)-4]
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: f.size(ia, ib)})
	serve := func(blk int32) *Buf {
		b := f.get(t, l, blk)
		l.Serve(b)
		l.Release(b) // idle between two reads of its user
		return b
	}
	a, b := serve(ia), serve(ib)
	got := make(chan *Buf)
	getAsync := func(blk int32) {
		go func() {
			c, err := l.Get(context.Background(), blockUnit(blk))
			if err != nil {
				t.Error(err)
			}
			got <- c
		}()
	}
	getAsync(ic)
	blocktest.Eventually(t, "the Get waits for memory", func() bool { return l.Stats().MemoryWaits > 0 })
	select {
	case <-got:
		t.Fatal("the Get evicted a buffer another user serves")
	case <-time.After(serveGrace / 2):
	}
	if s := l.Stats(); s.Evictions != 0 {
		t.Fatalf("stats %+v: a served buffer was evicted", s)
	}
	l.Pass(a)
	c := <-got
	if l.Reacquire(a) || !l.Reacquire(b) {
		t.Fatal("the Get did not take the memory of the passed buffer, and of it alone")
	}
	l.Release(b)
	l.Release(c)

	// b's user stops reading without passing it: after serveGrace, a Get
	// that waits for its memory takes it.
	l.Serve(c)
	l.Release(f.get(t, l, ic)) // c stays served and recently used
	getAsync(id)
	select {
	case d := <-got:
		l.Release(d)
	case <-time.After(10 * serveGrace):
		t.Fatal("a Get waited for a buffer whose user stopped reading, for good")
	}
	if l.Reacquire(b) {
		t.Fatal("the buffer its user stopped reading was not the one given up")
	}
}

// TestLoaderOutOfDescriptorsIsNotReportedAsAChangedSource makes every open
// fail with EMFILE: the error must say so and how to fix it, not that the
// source changed (which sent users to remount for nothing).
func TestLoaderOutOfDescriptorsIsNotReportedAsAChangedSource(t *testing.T) {
	f := newLoaderFixture(t)
	l := NewLoader(f.ix, LoaderOptions{MaxMemory: 1 << 20})
	// The limit is on descriptor numbers: at the lowest free one, every
	// open fails.
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	dirFd := fmt.Sprint(d.Fd())
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]bool{}
	for _, n := range names {
		open[n] = true
	}
	open[dirFd] = false
	free := 0
	for open[fmt.Sprint(free)] {
		free++
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	_, err = l.Get(t.Context(), blockUnit(0))
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "ulimit") || strings.Contains(err.Error(), "changed") || strings.Contains(err.Error(), "remount") {
		t.Fatalf("Get out of descriptors: %v, want EMFILE with advice, not a changed source", err)
	}
}
