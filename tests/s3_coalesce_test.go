package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
)

// A part that fits in one buffer (the sizing rule's whole-part buffer)
// reads every object whole, its blocks adjacent: the loader reads each
// with ceil(size/8 MiB) ranged GETs (one per run of adjacent blocks,
// runs of about equal size cut at block boundaries), not one per 1 MiB
// block. The GETs the server sees tile each object once, stats.json
// counts them under the epoch, and the epoch serves exactly the bytes
// the same mount of the same files in a local directory serves (a block
// a read from the page cache).
func TestS3PartInOneBufferReadsEachObjectWithCeilSizeOver8MiBGETs(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 40000, 512, 4, 4, "clustered")
	s.upload("data", "runs", src)
	p := startRangeLog(t, s)
	// A full index: a probed one's first epoch would also walk record
	// chains. No prefetch: the next epoch's buffer would be fetched too.
	flags := []string{"--seed", "5", "--parts", "1", "--max-memory", "4GiB", "--index", "full", "--block-size", "1MiB", "--prefetch", "0"}
	m := startMount(t, "s3://data/runs", append(flags, "--s3-endpoint", p.srv.URL)...)
	cfg := readConfig(t, m)
	if cfg.BufferPart < cfg.Dataset.Bytes {
		t.Fatalf("a buffer of %d bytes of the %d: the test needs the part in one buffer", cfg.BufferPart, cfg.Dataset.Bytes)
	}
	quietRanges(t, m, p) // indexing's GETs
	got := m.read(0, 0, 1)
	rs, _ := quietRanges(t, m, p)
	ep := readEpochCounts(t, m).Epochs["0"]

	const run = 8 << 20
	var want, gets, size int64
	for key, r := range rs {
		st, err := s.client.StatObject(t.Context(), "data", strings.TrimPrefix(key, "data/"), minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want += (st.Size + run - 1) / run
		gets += int64(len(r))
		size += st.Size
		var at int64
		for i, g := range r {
			n := g[1] - g[0] + 1
			if g[0] != at || n > run+cfg.BlockSize {
				t.Fatalf("%s: GET %d is bytes %d-%d of the GETs %v: want the GETs to tile the object, each of at most about %d bytes", key, i, g[0], g[1], r, run)
			}
			at = g[1] + 1
		}
		if at != st.Size {
			t.Fatalf("%s: the GETs end at byte %d of %d", key, at, st.Size)
		}
	}
	t.Logf("%d objects, %d bytes in %d blocks of %d bytes: %d GETs (stats.json: epoch 0 %+v)", len(rs), size, cfg.Dataset.Blocks, cfg.BlockSize, gets, ep)
	if len(rs) != 4 || size != cfg.Dataset.Bytes || gets != want || ep.SourceGETs != gets || ep.SourceBytes != size {
		t.Fatalf("epoch 0 read %d of the 4 objects, %d of %d bytes, with %d GETs (stats.json %+v); want every object read whole with %d GETs, ceil(size/8 MiB) each, all counted under epoch 0",
			len(rs), size, cfg.Dataset.Bytes, gets, ep, want)
	}

	// The same mount of the same files in a local directory.
	l := startMount(t, src, flags...)
	if local := l.read(0, 0, 1); !bytes.Equal(got, local) {
		t.Fatalf("epoch 0 through S3 (%d bytes) differs from the same mount of the local files (%d bytes)", len(got), len(local))
	}
	// And the files are those records: each of the source's once.
	var srcBytes int64
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		srcBytes += fi.Size()
	}
	if int64(len(got)) != srcBytes || len(frames(t, got)) != 40000 {
		t.Fatalf("epoch 0 served %d bytes of records of a %d-byte source; want its 40000 records", len(got), srcBytes)
	}
}
