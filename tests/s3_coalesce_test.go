package tests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// cutProxy passes requests to an S3 server, but cuts the body of the
// next cut ranged GETs of at least 2 MiB (a run's) after 60% of their
// bytes, having announced them all (or, chunked, none): a connection lost
// mid-body. It logs
// every ranged GET, and the cut ones with the bytes they sent.
type cutProxy struct {
	s   *s3Server
	srv *httptest.Server
	rp  *httputil.ReverseProxy
	cut atomic.Int64
	// chunked answers the cut GETs without a Content-Length (chunked):
	// a body whose end only its last chunk shows.
	chunked bool

	mu           sync.Mutex
	ranges, cuts []cutRange
}

// cutRange is a ranged GET of bytes first to last of object key, and for
// a cut one the bytes it sent.
type cutRange struct {
	key               string
	first, last, sent int64
}

func startCutProxy(t *testing.T, s *s3Server) *cutProxy {
	t.Helper()
	u, err := url.Parse(s.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{s: s, rp: httputil.NewSingleHostReverseProxy(u)}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *cutProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var first, last int64
	if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &first, &last); r.Method != http.MethodGet || err != nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	p.ranges = append(p.ranges, cutRange{r.URL.Path, first, last, 0})
	p.mu.Unlock()
	if last-first+1 < 2<<20 || p.cut.Add(-1) < 0 {
		p.rp.ServeHTTP(w, r)
		return
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	st, err := p.s.client.StatObject(r.Context(), bucket, key, minio.StatObjectOptions{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var o minio.GetObjectOptions
	o.SetRange(first, last)
	obj, err := p.s.client.GetObject(r.Context(), bucket, key, o)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	body, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	h := w.Header()
	h.Set("ETag", `"`+st.ETag+`"`)
	h.Set("Last-Modified", st.LastModified.UTC().Format(http.TimeFormat))
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, st.Size))
	if !p.chunked {
		h.Set("Content-Length", fmt.Sprint(len(body)))
	}
	w.WriteHeader(http.StatusPartialContent)
	w.(http.Flusher).Flush()
	sent := len(body) * 6 / 10
	w.Write(body[:sent])
	w.(http.Flusher).Flush()
	p.mu.Lock()
	p.cuts = append(p.cuts, cutRange{r.URL.Path, first, last, int64(sent)})
	p.mu.Unlock()
	panic(http.ErrAbortHandler) // the connection closed mid-body
}

// A run whose body is cut off mid-transfer is tried again from its first
// block not yet in: the blocks that arrived whole are kept (each was
// checked and may be served already), the next GET asks for the rest of
// the run only, and the epoch serves the exact bytes of the local mount,
// with every retry counted and no read failed.
func TestS3RunCutOffMidBodyIsTriedAgainFromItsFirstBlockNotYetIn(t *testing.T) {
	p := cutRunsEpoch(t, "cut", false, 3)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cuts {
		// The retry: the same run's end, from a block boundary past its
		// start (60% of a run of several 1 MiB blocks holds one whole)
		// and no later than the bytes that were sent.
		i := slices.IndexFunc(p.ranges, func(r cutRange) bool {
			return r.key == c.key && r.last == c.last && r.first > c.first && r.first <= c.first+c.sent
		})
		if i < 0 {
			t.Fatalf("the run of bytes %d-%d of %s, cut off after %d bytes, was not tried again from a block past its start: the GETs %v", c.first, c.last, c.key, c.sent, p.ranges)
		}
		t.Logf("%s: bytes %d-%d cut off after %d bytes, tried again as bytes %d-%d", c.key, c.first, c.last, c.sent, p.ranges[i].first, p.ranges[i].last)
	}
}

// A run answered without a Content-Length (chunked) is handed on only
// once its body has ended where the range does, since only the end shows
// a body longer than the range: cut off part way, it is tried again
// whole, from its first block, and the epoch serves the local mount's
// bytes.
func TestS3RunAnsweredWithoutALengthIsTriedAgainWholeWhenCutOff(t *testing.T) {
	p := cutRunsEpoch(t, "chunked", true, 2)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cuts {
		n := 0
		for _, r := range p.ranges {
			if r.key == c.key && r.first == c.first && r.last == c.last {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("the chunked run of bytes %d-%d of %s, cut off after %d bytes, was asked for %d times; want twice, whole: the GETs %v", c.first, c.last, c.key, c.sent, n, p.ranges)
		}
	}
}

// cutRunsEpoch reads epoch 0 of a dataset uploaded under prefix through a
// cut proxy (chunked: answering without a Content-Length) that cuts the
// first n GETs of the epoch off part way. It checks that the epoch serves
// the same mount's bytes of the local files, and that each cut GET was
// tried again once with no read failed; it returns the proxy, whose GETs
// the caller checks.
func cutRunsEpoch(t *testing.T, prefix string, chunked bool, n int) *cutProxy {
	t.Helper()
	s := startS3(t)
	src := genSynthetic(t, 40000, 512, 4, 4, "clustered")
	s.upload("data", prefix, src)
	p := startCutProxy(t, s)
	p.chunked = chunked
	flags := []string{"--seed", "5", "--parts", "1", "--max-memory", "4GiB", "--index", "full", "--block-size", "1MiB", "--prefetch", "0"}
	m := startMount(t, "s3://data/"+prefix, append(flags, "--s3-endpoint", p.srv.URL, "--s3-timeout", "10s")...)
	c0 := readS3Counters(t, m)
	p.cut.Store(int64(n))
	got := m.read(0, 0, 1)
	c1 := readS3Counters(t, m)
	l := startMount(t, src, flags...)
	if local := l.read(0, 0, 1); !bytes.Equal(got, local) {
		t.Fatalf("epoch 0 through S3 with %d runs cut off (chunked %v; %d bytes) differs from the same mount of the local files (%d bytes)", n, chunked, len(got), len(local))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cuts) != n || c1.Source.Retries-c0.Source.Retries != int64(n) || c1.Source.Failed != c0.Source.Failed {
		t.Fatalf("%d GETs cut off, %d retries, %d reads failed; want %d, %d, none", len(p.cuts), c1.Source.Retries-c0.Source.Retries, c1.Source.Failed-c0.Source.Failed, n, n)
	}
	return p
}
