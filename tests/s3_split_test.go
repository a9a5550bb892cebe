package tests

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// rangeLog is an HTTP proxy in front of an S3 server (path style:
// /bucket/key) that records the byte range of every ranged GET of each
// object.
type rangeLog struct {
	srv    *httptest.Server
	mu     sync.Mutex
	ranges map[string][][2]int64 // key: first, last
}

func startRangeLog(t *testing.T, s *s3Server) *rangeLog {
	t.Helper()
	u, err := url.Parse(s.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	g := &rangeLog{ranges: map[string][][2]int64{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var first, last int64
		if rng := r.Header.Get("Range"); r.Method == http.MethodGet && rng != "" {
			if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &first, &last); err == nil {
				g.mu.Lock()
				k := strings.Trim(r.URL.Path, "/")
				g.ranges[k] = append(g.ranges[k], [2]int64{first, last})
				g.mu.Unlock()
			}
		}
		rp.ServeHTTP(w, r) // the Host header stays the proxy's, which the request was signed for
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// take returns the ranges so far, each object's sorted, and starts again.
func (g *rangeLog) take() map[string][][2]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	got := g.ranges
	g.ranges = map[string][][2]int64{}
	for _, r := range got {
		slices.SortFunc(r, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	}
	return got
}

// A block larger than the split size (2 MiB) is fetched as several ranged
// GETs at once, whose ranges tile it exactly: over an epoch that reads
// every block once, each object's bytes are fetched once, in ranges of at
// most 2 MiB (rounded to a page), several a block.
func TestS3BlockLargerThanTheSplitSizeIsFetchedAsRangedGETsThatTileItExactly(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 12000, 1024, 4, 3, "clustered")
	s.upload("data", "split", src)
	p := startRangeLog(t, s)
	flags := []string{"--seed", "5", "--block-size", "8MiB"}
	// A read splits into as many ranges as GET slots are free when it
	// starts (source/s3 split.go): the epoch's 6 blocks of 4 ranges would
	// take all 24 default slots, and a block that starts while the others
	// hold them is read with one GET. With room for all, every block
	// splits, whatever the timing.
	s3Flags := []string{"--s3-concurrency", "64"}
	// No prefetch: the next epoch's first buffer would be fetched again.
	// A full index: a probed one proves its cuts by walking the record
	// chain in the first epoch, reads that are not the blocks'.
	m := startMount(t, "s3://data/split", append(append(slices.Clone(flags), s3Flags...), "--prefetch", "0", "--index", "full", "--s3-endpoint", p.srv.URL)...)
	want := orderBytes(t, src, 0, flags)
	time.Sleep(500 * time.Millisecond)
	p.take() // indexing's GETs
	c0 := readS3Counters(t, m)
	if got := m.read(0, 0, 1); !bytes.Equal(got, want) {
		t.Fatalf("epoch 0: %d bytes served differ from the %d `corgifs order` lists", len(got), len(want))
	}
	c1 := readS3Counters(t, m)
	got := p.take()
	blocks := c1.BlocksRead - c0.BlocksRead
	const split, page = 2 << 20, 4 << 10
	var gets int64
	for key, rs := range got {
		st, err := s.client.StatObject(t.Context(), "data", strings.TrimPrefix(key, "data/"), minio.StatObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Each byte once, in order: the ranges tile the object.
		var at int64
		for i, r := range rs {
			if r[0] != at {
				t.Fatalf("%s: range %d is bytes %d-%d, want it to start at %d (the ranges %v overlap or leave a gap)", key, i, r[0], r[1], at, rs)
			}
			if n := r[1] - r[0] + 1; n > split+page {
				t.Fatalf("%s: a ranged GET of %d bytes, more than the split size %d", key, n, split)
			}
			at = r[1] + 1
		}
		if at != st.Size {
			t.Fatalf("%s: the ranges end at %d, the object has %d bytes", key, at, st.Size)
		}
		gets += int64(len(rs))
	}
	t.Logf("epoch 0: %d blocks loaded, %d ranged GETs (%.1f a block)", blocks, gets, float64(gets)/float64(max(1, blocks)))
	if blocks == 0 || gets < 2*blocks || c1.Source.GETs-c0.Source.GETs != gets {
		t.Fatalf("epoch 0 loaded %d blocks of about 8 MiB with %d ranged GETs (stats.json: %d); want about 4 a block",
			blocks, gets, c1.Source.GETs-c0.Source.GETs)
	}
}
