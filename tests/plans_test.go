package tests

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/corgifs/corgifs/api"
)

// tinyRecords returns n valid frames with 8-byte payloads (the record's
// number), built without a per-record allocation so that millions are cheap.
func tinyRecords(n int) []byte {
	b := make([]byte, 0, n*24)
	for i := range n {
		var p [8]byte
		binary.LittleEndian.PutUint64(p[:], uint64(i))
		b = append(b, frame(8, p[:])...)
	}
	return b
}

// TestSharedPlansKeepTheDaemonWithinMemoryWith64OpenParts opens the 64 parts
// of one epoch of 2M records with strategy full and reads 4 KiB from each,
// keeping them all open. Every open part used to compute and keep its own
// permutation of all records (8 MB here; the issue saw RSS grow from 88 MB
// to 1.37 GB with 5M records) outside --max-memory. The parts now share
// one: the daemon's peak RSS stays within --max-memory plus the margin
// every load test allows.
func TestSharedPlansKeepTheDaemonWithinMemoryWith64OpenParts(t *testing.T) {
	const n, k = 2_000_000, 64
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "a.tfrecord"), tinyRecords(n))
	// 64 MiB: the index's tables may take a quarter of --max-memory (2M
	// records take 8 MiB; index.TableBudget), and 16 MiB would refuse
	// them. 4 MiB blocks: a block is the block size plus up to a record,
	// and with direct reads whole pages.
	const budget = 64 << 20
	m := startMount(t, src, "--strategy", "full", "--max-memory", "64MiB", "--seed", "1", "--parts", fmt.Sprint(k), "--block-size", "4MiB")
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i := range k {
		f, err := os.Open(m.part(3, i, k))
		if err != nil {
			t.Fatalf("open part %d: %v\n%s", i, err, m.log)
		}
		files = append(files, f)
		if _, err := f.Read(make([]byte, 4096)); err != nil {
			t.Fatalf("read part %d: %v\n%s", i, err, m.log)
		}
	}
	var st api.Stats
	raw, _ := os.ReadFile(api.StatsPath(m.dir))
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("stats.json: %v\n%s", err, raw)
	}
	// Epoch 3's permutation, and epoch 0's when the mount summed the padding
	// or listed sizes; never one per open part.
	if st.Plans.SequencesComputed > 2 || st.Plans.OpenPlans != k {
		t.Errorf("stats.json plans %+v: want at most 2 permutations computed and %d plans open", st.Plans, k)
	}
	hwm := vmHWM(t, m.cmd.Process.Pid)
	t.Logf("daemon peak RSS with %d open parts of %d records: %d MiB", k, n, hwm>>20)
	if hwm > budget+rssMargin(t) {
		t.Errorf("daemon peak RSS %d MiB with %d open parts, want at most %d MiB (--max-memory + margin)", hwm>>20, k, (budget+rssMargin(t))>>20)
	}
}

// TestEqualPartsPaddingOfAHugeRecordReadsFullyWithinBounds serves 3 parts of
// a set of 10,000 small records and one 2 MiB record, in blocks such that
// the part with the big record holds nothing else. Padding used to repeat
// the big record thousands of times, in one buffer beyond --max-memory,
// and the part gave EIO from offset 0. Now every part reads fully with the
// same record count, the big record is served once, and every repeated
// record is no larger than the average frame.
func TestEqualPartsPaddingOfAHugeRecordReadsFullyWithinBounds(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	writeFile(t, filepath.Join(src, "a.tfrecord"), records("a", 5000, 100))
	writeFile(t, filepath.Join(src, "b.tfrecord"), records("b", 1, 2<<20))
	writeFile(t, filepath.Join(src, "c.tfrecord"), records("c", 5000, 100))
	want := sourceRecords(t, src)
	var srcBytes int64
	for _, name := range []string{"a", "b", "c"} {
		fi, _ := os.Stat(filepath.Join(src, name+".tfrecord"))
		srcBytes += fi.Size()
	}
	avg := srcBytes / int64(len(want))
	m := startMount(t, src, "--parts", "3", "--equal-parts", "--block-size", "1MiB", "--max-memory", "16MiB", "--seed", "3")
	served := map[[32]byte]int{}
	count := map[int]bool{}
	var total int64
	for i := range 3 {
		b, err := readUntilErr(m.part(0, i, 3))
		if err != nil {
			t.Fatalf("part %d: %d bytes, then %v\n%s", i, len(b), err, m.log)
		}
		recs := frames(t, b)
		count[len(recs)] = true
		for j, h := range hashes(recs) {
			if served[h]++; served[h] > 1 && int64(len(recs[j])+16) > avg {
				t.Errorf("part %d repeats a record of %d bytes, over the average frame of %d", i, len(recs[j])+16, avg)
			}
		}
		total += int64(len(b))
	}
	if len(count) != 1 {
		t.Fatalf("parts hold %v records, want one count", count)
	}
	var padded int64
	for _, h := range want {
		if served[h] == 0 {
			t.Fatal("a source record is missing")
		}
		padded += int64(served[h] - 1)
	}
	big := bytes.Repeat([]byte{0}, 2<<20)
	copy(big, "b-0")
	if n := served[hashes([][]byte{big})[0]]; n != 1 {
		t.Errorf("the 2 MiB record is served %d times, want once", n)
	}
	if total > srcBytes+padded*avg {
		t.Errorf("the epoch holds %d bytes: %d of source and %d padding records, over the average frame of %d each", total, srcBytes, padded, avg)
	}
	t.Logf("%d bytes in the epoch, %d of source, %d padding records", total, srcBytes, padded)
}
