package tests

import (
	"bytes"
	"fmt"
	"testing"
)

// TestMRSMountServesValidFramesAsOrderSaysEachRecordOnceInThatEpochOrTheNext
// mounts --strategy mrs twice with one seed and reads 3 epochs of 3 parts:
// every frame is valid, both mounts serve the same bytes, `corgifs order`
// prints the records served, and a record is served once in the epoch it
// is scanned or in the next (shuffler/mrs.go): with c_e its count in epoch
// e and m its count in the source, kept_e = kept_{e−1} + m − c_e stays
// within [0, m], some records are kept, and epoch 0 is the shorter.
func TestMRSMountServesValidFramesAsOrderSaysEachRecordOnceInThatEpochOrTheNext(t *testing.T) {
	src := genSynthetic(t, 3000, 8, 4, 3, "clustered")
	source := map[[32]byte]int{}
	for _, h := range sourceRecords(t, src) {
		source[h]++
	}
	cache := t.TempDir()
	flags := []string{"--strategy", "mrs", "--block-size", "16KiB", "--buffer", "10%", "--seed", "9"}
	a := startMount(t, src, flags...)
	b := startMount(t, src, flags...)
	const k = 3
	kept := map[[32]byte]int{}
	var lens []int
	for e := range 3 {
		count := map[[32]byte]int{}
		n := 0
		for i := range k {
			data := a.read(e, i, k)
			if !bytes.Equal(data, b.read(e, i, k)) {
				t.Fatalf("epoch %d part %d: two mounts with seed 9 serve different bytes", e, i)
			}
			served := frames(t, data)
			if e == 1 { // epoch 1 serves both scan and kept records
				out := corgifs(t, append([]string{"order", src, "--epoch", fmt.Sprint(e), "--part", fmt.Sprint(i), "--parts", fmt.Sprint(k), "--cache-dir", cache}, flags...)...)
				order := orderFrames(t, src, out)
				if len(order) != len(served) {
					t.Fatalf("epoch %d part %d: order printed %d records, the mount served %d", e, i, len(order), len(served))
				}
				for j, o := range order {
					if !bytes.Equal(o.payload(), served[j]) {
						t.Fatalf("epoch %d part %d record %d: order says %s, not the record served", e, i, j, o.line)
					}
				}
			}
			for _, h := range hashes(served) {
				count[h]++
			}
			n += len(served)
		}
		lens = append(lens, n)
		held := 0
		for h, m := range source {
			kept[h] += m - count[h]
			if kept[h] < 0 || kept[h] > m {
				t.Fatalf("epoch %d: a record written %d times is served %d times, %d kept before: not once in this epoch or the next", e, m, count[h], kept[h]-m+count[h])
			}
			held += kept[h]
			delete(count, h)
		}
		if len(count) > 0 {
			t.Fatalf("epoch %d: %d records served that the source does not hold", e, len(count))
		}
		if held == 0 || lens[0]+held != 3000 {
			t.Fatalf("epoch %d: %d records kept in the reservoirs, epoch 0 served %d of 3000", e, held, lens[0])
		}
		if e > 0 && n != 3000 {
			t.Fatalf("epoch %d served %d records, want 3000", e, n)
		}
	}
}

// TestValidateTrainsOnMRSThroughAMountWithoutPrefetch: `corgifs validate
// --strategies mrs` trains on mrs epochs read through a mount, with
// --prefetch passed to it.
func TestValidateTrainsOnMRSThroughAMountWithoutPrefetch(t *testing.T) {
	fuseOK(t)
	train := genSynthetic(t, 3000, 8, 3, 2, "clustered")
	test := genSynthetic(t, 600, 8, 3, 1, "shuffled", "--first-id", "3000")
	r := validateJSON(t, "validate", "--data", train, "--test", test, "--strategies", "mrs", "--prefetch", "0",
		"--epochs", "2", "--block-size", "8KiB", "--buffer", "10%", "--seed", "3", "--cache-dir", t.TempDir())
	if len(r.Runs) != 1 || r.Runs[0].Strategy != "mrs" || len(r.Runs[0].Epochs) != 2 {
		t.Fatalf("validate --strategies mrs reported %+v, want 2 epochs of mrs", r.Runs)
	}
}
