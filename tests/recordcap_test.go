package tests

// Memory per block (issue 22, item 5): a block of 8 MiB of tiny records
// holds half a million of them, and whatever the index, the loader or the
// shuffler keeps per record of a loaded block grows with that count, not
// with the block's bytes. RELIABILITY.md lists the test.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// tinyFrames writes n TFRecord frames whose 4-byte payloads are their
// ids 0..n-1 (big-endian), with both CRCs valid: 20 bytes a record.
func tinyFrames(n int64) func(io.Writer) error {
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		var p [4]byte
		for i := range n {
			binary.BigEndian.PutUint32(p[:], uint32(i))
			if _, err := bw.Write(frame(4, p[:])); err != nil {
				return err
			}
		}
		return bw.Flush()
	}
}

// countIDs reads the part at path to its end (reads of 1 MiB), checks each
// frame's CRCs and 4-byte payload, and adds one to seen[id] for each
// record.
func countIDs(path string, seen []uint8) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var buf [20]byte
	var n int64
	for {
		if _, err := io.ReadFull(r, buf[:]); err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, fmt.Errorf("record %d: %w", n, err)
		}
		if binary.LittleEndian.Uint64(buf[:8]) != 4 || maskedCRC32C(buf[:8]) != le32(buf[8:12]) || maskedCRC32C(buf[12:16]) != le32(buf[16:20]) {
			return n, fmt.Errorf("record %d: not a valid frame of 4 bytes: % x", n, buf)
		}
		id := binary.BigEndian.Uint32(buf[12:16])
		if int(id) >= len(seen) {
			return n, fmt.Errorf("record %d: id %d, past the %d records of the source", n, id, len(seen))
		}
		seen[id]++ // ids are disjoint across parts of an epoch, or the check below fails anyway
		n++
	}
}

// A .tfrecord.gz of 4 million records of 4 bytes (20 bytes a frame, so
// 419,430 records in a block of 8 MiB), mounted at --max-memory 64MiB
// with 8 MiB blocks and read by 4 readers at once, all 4 parts of each of
// two epochs: every record is served exactly once an epoch, and the
// daemon's peak resident size over indexing and reading stays within
// --max-memory + 64 MiB. Before blocks were capped at 64Ki records, each
// loaded block kept tables of its half-million records beside its bytes,
// and such a mount peaked at about 144 MiB.
func TestBlocksOfMillionsOfTinyRecordsStayWithinMaxMemoryPlus64MiB(t *testing.T) {
	const budget, k, epochs = 64 << 20, 4, 2
	records := raceScale(4_000_000)
	src := filepath.Join(t.TempDir(), "src")
	compressWith(t, "pigz -p 2 -6 -c", filepath.Join(src, "a.tfrecord.gz"), tinyFrames(records))
	m := startMount(t, src, "--max-memory", "64MiB", "--block-size", "8MiB", "--seed", "11", "--parts", fmt.Sprint(k))
	seen := make([]uint8, records)
	for e := range epochs {
		clear(seen)
		counts := make([]int64, k)
		errs := make([]error, k)
		var wg sync.WaitGroup
		var mu sync.Mutex // guards seen between the readers' parts
		start := make(chan struct{})
		for i := range k {
			wg.Go(func() {
				<-start
				own := make([]uint8, records)
				counts[i], errs[i] = countIDs(m.part(e, i, k), own)
				mu.Lock()
				for id, c := range own {
					seen[id] += c
				}
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		var total int64
		for i := range k {
			if errs[i] != nil {
				t.Fatalf("epoch %d part %d: %v\n%s", e, i, errs[i], m.log)
			}
			total += counts[i]
		}
		var missing, dup int64
		for _, c := range seen {
			switch {
			case c == 0:
				missing++
			case c > 1:
				dup++
			}
		}
		if total != records || missing != 0 || dup != 0 {
			t.Errorf("epoch %d: %d records served, want %d; %d ids missing, %d served more than once", e, total, records, missing, dup)
		}
	}
	hwm := procStatus(t, m.cmd.Process.Pid, "VmHWM")
	limit := budget + statedMargin()
	t.Logf("%d records, %d epochs by %d readers: daemon peak RSS %d MiB (limit %d MiB)", records, epochs, k, hwm>>20, limit>>20)
	if hwm > limit {
		t.Errorf("daemon peak RSS %d MiB over indexing and reading %d records of 4 bytes in 8 MiB blocks, want at most %d MiB (--max-memory + 64 MiB)", hwm>>20, records, limit>>20)
	}
}
