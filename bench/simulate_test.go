//go:build linux

package main

import (
	"slices"
	"testing"
)

// TestBeladyKeepsWhatIsReadAgainSoonest: with room for two of three
// blocks read in a cycle, Belady's rule keeps the two read again first
// and passes the third by (4 fetches over two cycles, where LRU would
// fetch all 6); with room for all, only the first reads fetch.
func TestBeladyKeepsWhatIsReadAgainSoonest(t *testing.T) {
	reads := []int32{1, 2, 3, 1, 2, 3}
	size := func(int32) int64 { return 10 }
	st := belady(reads, []int{0, 3}, size, 20)
	if !slices.Equal(st.gets, []int64{3, 1}) || !slices.Equal(st.fetched, []int64{30, 10}) || !slices.Equal(st.peak, []int64{20, 20}) {
		t.Fatalf("capacity 2 blocks: %+v; want 3 then 1 fetches, 30 then 10 bytes, a peak of 20", st)
	}
	st = belady(reads, []int{0, 3}, size, 30)
	if !slices.Equal(st.gets, []int64{3, 0}) || !slices.Equal(st.peak, []int64{30, 30}) {
		t.Fatalf("capacity 3 blocks: %+v; want 3 then 0 fetches", st)
	}
}
