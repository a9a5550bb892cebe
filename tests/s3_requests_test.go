package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/dustin/go-humanize"
	"github.com/minio/minio-go/v7"
)

// readConfig reads the mount's config.json.
func readConfig(t *testing.T, m *mount) api.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, ".corgifs", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c api.Config
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// epochCounts are the per-epoch counters of stats.json the request tests
// read: the bytes and GETs that loaded each epoch's blocks.
type epochCounts struct {
	Epochs map[string]struct {
		SourceBytes int64 `json:"source_bytes"`
		SourceGETs  int64 `json:"source_gets"`
	} `json:"epochs"`
}

func readEpochCounts(t *testing.T, m *mount) epochCounts {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, ".corgifs", "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c epochCounts
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// quietRanges waits until neither the proxy nor stats.json moves for
// half a second (prefetches done), and returns the ranges the proxy saw
// since its last take, with the counters.
func quietRanges(t *testing.T, m *mount, p *rangeLog) (map[string][][2]int64, s3Counters) {
	t.Helper()
	count := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, r := range p.ranges {
			n += len(r)
		}
		return n
	}
	n, c := count(), readS3Counters(t, m)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		n2, c2 := count(), readS3Counters(t, m)
		if n2 == n && c2.Source.GETs == c.Source.GETs && c2.BlocksRead == c.BlocksRead {
			break
		}
		n, c = n2, c2
	}
	return p.take(), c
}

// rangeTotals is the number of GETs and bytes of ranges, the smallest GET,
// and the sum of the objects' sizes.
func rangeTotals(rs map[string][][2]int64) (gets, bytes, smallest int64) {
	smallest = -1
	for _, r := range rs {
		for _, g := range r {
			n := g[1] - g[0] + 1
			gets++
			bytes += n
			if smallest < 0 || n < smallest {
				smallest = n
			}
		}
	}
	return gets, bytes, smallest
}

// At the defaults (no flag but the endpoint: a probe index, the sizing
// rule's block size for an object store), the probe index fetches at most
// 5% of the dataset, and the first two epochs make one GET per run of
// adjacent blocks loaded and none of a header: every GET the server sees
// is of blocks (the distinct ranges of each object tile it exactly), counted in
// stats.json under its epoch (none is a read of the
// record-chain walk that proves the probed boundaries: it jumps over the
// blocks the buffer loaded), and stats.json's GETs and bytes equal the
// server's. Two datasets: 2,000
// one-record objects (issue 25 measured a 12-byte GET before each block's
// GET, 20,277 GETs an epoch for 10,000 objects) and three of 4 MiB.
//
// Then a first mount after `corgifs index --block-size 256KiB`, at the
// default block size (1 MiB, a multiple of it), makes no ranged GET at
// all: it merges the blocks of the saved index instead of probing again.
// The rule: an index saved at a block size b serves a mount at any
// B = b·2^k without a read; at a smaller or other block size the source
// is probed again.
func TestS3EpochAtTheDefaultsGETsOnlyItsBlocksAndProbesUnderFivePercent(t *testing.T) {
	s := startS3(t)
	s.upload("data", "small", genSynthetic(t, 2000, 512, 4, 2000, "clustered"))
	s.upload("large", "set", genSynthetic(t, 18000, 512, 4, 3, "clustered"))
	p := startRangeLog(t, s)
	for _, c := range []struct{ name, src string }{{"2000 one-record objects", "s3://data/small"}, {"3 objects", "s3://large/set"}} {
		m := startMount(t, c.src, "--s3-endpoint", p.srv.URL)
		cfg := readConfig(t, m)
		probe, c0 := quietRanges(t, m, p)
		pGETs, pBytes, pSmall := rangeTotals(probe)
		t.Logf("%s: %d bytes in %d blocks of %d bytes (index %s); the index: %d GETs, %d bytes (%.2f%% of the dataset), the smallest %d bytes",
			c.name, cfg.Dataset.Bytes, cfg.Dataset.Blocks, cfg.BlockSize, cfg.Dataset.Index, pGETs, pBytes, 100*float64(pBytes)/float64(cfg.Dataset.Bytes), pSmall)
		if cfg.Dataset.Index != "probe" || cfg.BlockSize < 1<<20 {
			t.Fatalf("%s: the defaults gave index %q and %d-byte blocks; want a probe index and the object store's floor of 1 MiB", c.name, cfg.Dataset.Index, cfg.BlockSize)
		}
		if pBytes*20 > cfg.Dataset.Bytes || c0.Source.GETs != pGETs || c0.Source.GETBytes != pBytes {
			t.Fatalf("%s: the probe index fetched %d bytes in %d GETs (stats.json: %d, %d bytes) of a %d-byte dataset; want at most 5%%, and stats.json to agree",
				c.name, pBytes, pGETs, c0.Source.GETs, c0.Source.GETBytes, cfg.Dataset.Bytes)
		}
		for e := range 2 {
			if got := m.read(e, 0, 1); int64(len(got)) != cfg.Dataset.Bytes {
				t.Fatalf("%s: epoch %d served %d bytes of %d", c.name, e, len(got), cfg.Dataset.Bytes)
			}
		}
		rs, c1 := quietRanges(t, m, p)
		gets, bytes, smallest := rangeTotals(rs)
		ep := readEpochCounts(t, m)
		var epochGETs, epochBytes int64
		for _, v := range ep.Epochs {
			epochGETs += v.SourceGETs
			epochBytes += v.SourceBytes
		}
		proofs, proofBytes := c1.ProofReads-c0.ProofReads, c1.ProofBytes-c0.ProofBytes
		t.Logf("%s: epochs 0 and 1 (and the prefetch of 2): the server saw %d GETs, %d bytes, the smallest %d bytes; stats.json: %d GETs, %d bytes; per epoch %+v; proof walks %d GETs, %d bytes",
			c.name, gets, bytes, smallest, c1.Source.GETs-c0.Source.GETs, c1.Source.GETBytes-c0.Source.GETBytes, ep.Epochs, proofs, proofBytes)
		if smallest >= 0 && smallest < 16 {
			t.Fatalf("%s: a GET of %d bytes during the epochs: a header's, not a block's", c.name, smallest)
		}
		if c1.Source.GETs-c0.Source.GETs != gets || c1.Source.GETBytes-c0.Source.GETBytes != bytes {
			t.Fatalf("%s: stats.json counts %d GETs and %d bytes, the server saw %d and %d", c.name, c1.Source.GETs-c0.Source.GETs, c1.Source.GETBytes-c0.Source.GETBytes, gets, bytes)
		}
		// Every block of a file is in the one buffer of the part (the
		// defaults' buffer of a small dataset): the record-chain walk
		// jumps over them all once they tiled, and reads nothing.
		if proofs != 0 || epochGETs != gets || epochBytes != bytes {
			t.Fatalf("%s: the epochs' GETs (%d, %d bytes) and the proof walks' (%d, %d bytes) are not the %d GETs and %d bytes the server saw",
				c.name, epochGETs, epochBytes, proofs, proofBytes, gets, bytes)
		}
		// The blocks of an object follow each other in the one buffer:
		// one GET for each run of adjacent blocks, ceil(size/run) an
		// object, runs of 8 MiB, or less, down to 2 MiB, to keep 8 GETs
		// in flight (blockcache/runs.go). A one-record object is a block.
		run := max(2<<20, min(8<<20, cfg.Dataset.Bytes/8))
		var want int64
		for key := range rs {
			bucket, obj, _ := strings.Cut(key, "/")
			st, err := s.client.StatObject(t.Context(), bucket, obj, minio.StatObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want += (st.Size + run - 1) / run
		}
		for e := range 2 {
			v := ep.Epochs[string(rune('0'+e))]
			if v.SourceBytes != cfg.Dataset.Bytes || v.SourceGETs != want {
				t.Fatalf("%s: epoch %d loaded %d bytes with %d GETs; want the dataset's %d bytes with %d GETs, one for each run of adjacent blocks of at most %d bytes (%d blocks)",
					c.name, e, v.SourceBytes, v.SourceGETs, cfg.Dataset.Bytes, want, run, cfg.Dataset.Blocks)
			}
		}
		// Every GET is a block or one of its ranges: the distinct
		// ranges of an object tile it, from its first byte to its last,
		// none overlapping another (a header's or a probe's would).
		for key, r := range rs {
			bucket, obj, _ := strings.Cut(key, "/")
			st, err := s.client.StatObject(t.Context(), bucket, obj, minio.StatObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tiles := slices.Compact(slices.Clone(r))
			for i, g := range tiles {
				if (i == 0 && g[0] != 0) || (i > 0 && g[0] != tiles[i-1][1]+1) || (i == len(tiles)-1 && g[1] != st.Size-1) {
					t.Fatalf("%s: %s: the GETs' distinct ranges %v do not tile its %d bytes: range %d is bytes %d-%d", c.name, key, tiles, st.Size, i, g[0], g[1])
				}
			}
		}
		if strings.HasSuffix(c.src, "small") {
			// Each object is a block: every GET is a whole object.
			for key, r := range rs {
				st, err := s.client.StatObject(t.Context(), "data", strings.TrimPrefix(key, "data/"), minio.StatObjectOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, g := range r {
					if g[0] != 0 || g[1] != st.Size-1 {
						t.Fatalf("%s: %s: a GET of bytes %d-%d of its %d", c.name, key, g[0], g[1], st.Size)
					}
				}
			}
		}
		m.stop()
	}

	// An index built at 256 KiB, then a first mount at the default block
	// size.
	cache := t.TempDir()
	out := corgifs(t, "index", "s3://large/set", "--block-size", "256KiB", "--cache-dir", cache, "--s3-endpoint", p.srv.URL)
	built, builtBytes, _ := rangeTotals(p.take())
	// `corgifs index` says what the index cost the store, as the
	// server counted it.
	if want := fmt.Sprintf(" ranged GETs of %s (%d bytes)\n", humanize.IBytes(uint64(builtBytes)), builtBytes); !strings.Contains(out, fmt.Sprintf(", of which %d%s", built, want)) {
		t.Fatalf("corgifs index printed\n%s\nwant a requests line with the %d GETs and %d bytes the server saw", out, built, builtBytes)
	}
	m := startMount(t, "s3://large/set", "--s3-endpoint", p.srv.URL, "--cache-dir", cache)
	cfg := readConfig(t, m)
	rs, _ := quietRanges(t, m, p)
	gets, bytes, _ := rangeTotals(rs)
	t.Logf("remount at %d-byte blocks after an index at 256 KiB (%d GETs): %d GETs, %d bytes", cfg.BlockSize, built, gets, bytes)
	if cfg.BlockSize%(256<<10) != 0 || gets != 0 || !strings.Contains(m.log.String(), "reusing the probed index built at another block size") {
		t.Fatalf("a first mount at %d-byte blocks after `corgifs index --block-size 256KiB` made %d GETs (%d bytes); want none, the saved index's blocks merged\n%s",
			cfg.BlockSize, gets, bytes, m.log)
	}
	if got := m.read(0, 0, 1); int64(len(got)) != cfg.Dataset.Bytes {
		t.Fatalf("remount: epoch 0 served %d bytes of %d", len(got), cfg.Dataset.Bytes)
	}
}

// A first epoch of a probed index whose part spans several buffers proves
// the cuts of each buffer's blocks before serving them, by the record
// chain from the start of each object. Over records smaller than a walk's
// window that chain is every byte of the gaps between the buffer's blocks:
// the walk reads them as whole blocks, in runs of adjacent blocks, several
// at once, never a header at a time. Checked through the server's own view
// (a range-logging proxy): no GET of the epoch is a header's or a window's, the walks read each gap byte at most once, and the
// epoch's records are those of a mount of the same objects with a full
// index (every byte read), each once.
func TestS3FirstEpochOfAProbedIndexProvesItsCutsByReadingWholeBlocksAhead(t *testing.T) {
	s := startS3(t)
	s.upload("large", "set", genSynthetic(t, 18000, 512, 4, 3, "clustered"))
	p := startRangeLog(t, s)
	// 16 MiB of memory: buffers of three 1 MiB blocks, four to an epoch.
	flags := []string{"--s3-endpoint", p.srv.URL, "--max-memory", "16MiB"}
	m := startMount(t, "s3://large/set", flags...)
	cfg := readConfig(t, m)
	if cfg.Dataset.Index != "probe" || cfg.BlockSize != 1<<20 || cfg.Dataset.Blocks < 9 {
		t.Fatalf("index %q, %d-byte blocks, %d blocks; want a probe index of 1 MiB blocks, more than three buffers of them", cfg.Dataset.Index, cfg.BlockSize, cfg.Dataset.Blocks)
	}
	_, c0 := quietRanges(t, m, p)
	got := m.read(0, 0, 1)
	rs, c1 := quietRanges(t, m, p)
	gets, bytes, smallest := rangeTotals(rs)
	proofs, proofBytes := c1.ProofReads-c0.ProofReads, c1.ProofBytes-c0.ProofBytes
	t.Logf("epoch 0 (and the prefetch of epoch 1): %d GETs, %d bytes, the smallest %d; proof walks %d reads, %d bytes, of a %d-byte dataset in %d blocks",
		gets, bytes, smallest, proofs, proofBytes, cfg.Dataset.Bytes, cfg.Dataset.Blocks)
	if proofs == 0 {
		t.Fatalf("no proof walk read anything: the buffers are not what the test means (config %+v)", cfg)
	}
	// The last block of an object may be short, a header is 12 bytes and
	// a walk's first window 4 KiB.
	if smallest < 16<<10 {
		t.Fatalf("a GET of %d bytes in the first epoch: a walk read a header or a window, not whole blocks", smallest)
	}
	if proofBytes > cfg.Dataset.Bytes || proofs > int64(cfg.Dataset.Blocks) {
		t.Fatalf("the proof walks read %d bytes in %d reads; want each gap byte at most once (%d bytes), at most a read a block (%d)",
			proofBytes, proofs, cfg.Dataset.Bytes, cfg.Dataset.Blocks)
	}
	m.stop()
	// Every record once, as a full index (every byte read, every cut a
	// record boundary) has them; its mount is another configuration
	// (config.json's index), whose order is not compared.
	full := startMount(t, "s3://large/set", append(flags, "--index", "full")...)
	if g, w := sortedHashes(hashes(frames(t, got))), sortedHashes(hashes(frames(t, full.read(0, 0, 1)))); !slices.Equal(g, w) {
		t.Fatalf("the probed index's first epoch served %d records, not the %d of a full index's epoch", len(g), len(w))
	}
}
