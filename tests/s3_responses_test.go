package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// The ways a server, gateway or proxy answers a ranged GET with other
// bytes than the range: HTTP allows the first, the others are bugs seen
// in the wild.
const (
	rangeHealthy = iota
	rangeWholeObject
	rangeShifted
	rangeShortBody
)

// rangeProxy is an HTTP proxy in front of an S3 server (path style:
// /bucket/key) that answers some ranged GETs itself, with the bytes a
// misbehaving server would send, fetched from the server by the test's
// own client (the client's request is signed with its Range, which the
// proxy cannot drop). Other requests pass through.
type rangeProxy struct {
	t   *testing.T
	s   *s3Server
	srv *httptest.Server
	rp  *httputil.ReverseProxy
	// mode is a range* fault given to one ranged GET in every.
	mode, every atomic.Int64
	// fail503 is how many of the next ranged GETs get 503 SlowDown.
	fail503 atomic.Int64
	// ranged counts the ranged GETs seen, faulted those answered wrong,
	// small those of fewer bytes than the smallest TFRecord frame (16):
	// reads of a header, not of a block.
	ranged, faulted, small atomic.Int64
}

func startRangeProxy(t *testing.T, s *s3Server) *rangeProxy {
	t.Helper()
	u, err := url.Parse(s.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &rangeProxy{t: t, s: s, rp: httputil.NewSingleHostReverseProxy(u)}
	p.every.Store(1)
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// set faults one ranged GET in every with mode from now on.
func (p *rangeProxy) set(mode, every int) {
	p.every.Store(int64(every))
	p.mode.Store(int64(mode))
}

func (p *rangeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rng := r.Header.Get("Range")
	if r.Method != http.MethodGet || rng == "" {
		p.rp.ServeHTTP(w, r) // the Host header stays the proxy's, which the request was signed for
		return
	}
	n := p.ranged.Add(1)
	var first, last int64
	if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &first, &last); err != nil {
		http.Error(w, "test proxy: Range "+rng, http.StatusBadRequest)
		return
	}
	if last-first+1 < 16 {
		p.small.Add(1)
	}
	if left := p.fail503.Add(-1); left >= 0 {
		p.faulted.Add(1)
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, body)
		return
	} else {
		p.fail503.CompareAndSwap(left, 0)
	}
	mode := p.mode.Load()
	if mode == rangeHealthy || n%p.every.Load() != 0 {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.faulted.Add(1)
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	ctx := r.Context()
	st, err := p.s.client.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	get := func(a, b int64) []byte {
		var o minio.GetObjectOptions
		o.SetRange(a, b)
		obj, err := p.s.client.GetObject(ctx, bucket, key, o)
		if err != nil {
			return nil
		}
		defer obj.Close()
		data, _ := io.ReadAll(obj)
		return data
	}
	h := w.Header()
	h.Set("ETag", `"`+st.ETag+`"`)
	h.Set("Last-Modified", st.LastModified.UTC().Format(http.TimeFormat))
	status := http.StatusPartialContent
	var body []byte
	switch mode {
	case rangeWholeObject:
		// What HTTP allows: the Range ignored.
		body, status = get(0, st.Size-1), http.StatusOK
	case rangeShifted:
		// Another range, said honestly in Content-Range.
		a, b := first-1, last-1
		if first == 0 {
			a, b = 1, min(last+1, st.Size-1)
		}
		body = get(a, b)
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, st.Size))
	case rangeShortBody:
		// The range's header with half its bytes, framed as complete.
		body = get(first, last)
		body = body[:len(body)/2]
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, st.Size))
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// orderBytes is part 0 of 1 of epoch as `corgifs order` lists it, read
// from the local directory src: the bytes a mount must serve.
func orderBytes(t *testing.T, src string, epoch int, flags []string) []byte {
	t.Helper()
	out := corgifs(t, append([]string{"order", src, "--epoch", fmt.Sprint(epoch), "--part", "0", "--parts", "1", "--cache-dir", t.TempDir()}, flags...)...)
	var b []byte
	for _, o := range orderFrames(t, src, out) {
		b = append(b, o.frame...)
	}
	return b
}

// readEIOOrExact reads the file in chunks and fails unless every chunk is
// the bytes of want at its offset or EIO. It returns the chunks of each.
func readEIOOrExact(t *testing.T, path string, want []byte) (good, eio int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	for off := 0; off < len(want); off += chunk {
		n, err := f.ReadAt(buf, int64(off))
		switch {
		case errors.Is(err, syscall.EIO):
			eio++
			continue
		case err != nil && err != io.EOF:
			t.Fatalf("%s at offset %d: %v, want the bytes or EIO", path, off, err)
		}
		if end := min(off+chunk, len(want)); n != end-off || !bytes.Equal(buf[:n], want[off:end]) {
			t.Fatalf("%s at offset %d: %d bytes served that are not the source's %d there: wrong bytes, not EIO", path, off, n, end-off)
		}
		good++
	}
	if n, err := f.ReadAt(buf[:1], int64(len(want))); n != 0 || (err != io.EOF && !errors.Is(err, syscall.EIO)) {
		t.Fatalf("%s: %d bytes past its %d, %v", path, n, len(want), err)
	}
	return good, eio
}

// An S3 server or proxy that answers ranged GETs with the whole object
// (a 200, which HTTP allows), another range, or a body cut short but
// framed as whole: every read of the mount gives the source's bytes or
// EIO, never others; each such answer is counted in stats.json as a bad
// response and logged with the object and the status; and nothing of it
// reaches the disk cache: a later mount with the same --disk-cache
// against a healthy server serves exact epochs.
func TestS3RangedGETAnsweredWithOtherBytesGivesEIOOrTheRightBytesAndIsNeverCached(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 3000, 16, 4, 3, "clustered")
	s.upload("data", "ranges", src)
	flags := []string{"--seed", "11", "--block-size", "16KiB"}
	want := [][]byte{orderBytes(t, src, 0, flags), orderBytes(t, src, 1, flags), orderBytes(t, src, 2, flags)}
	for _, c := range []struct {
		name string
		mode int
	}{{"whole object", rangeWholeObject}, {"shifted range", rangeShifted}, {"short body", rangeShortBody}} {
		t.Run(c.name, func(t *testing.T) {
			p := startRangeProxy(t, s)
			remote := append(slices.Clone(flags), "--s3-endpoint", p.srv.URL, "--cache-dir", t.TempDir(), "--s3-timeout", "5s")
			// Indexed through a healthy proxy; the mount under faults
			// reuses the index and makes every ranged GET of its own.
			startMount(t, "s3://data/ranges", remote...).stop()
			remote = append(remote, "--disk-cache", filepath.Join(t.TempDir(), "disk-cache"))
			p.set(c.mode, 2)
			m := startMount(t, "s3://data/ranges", remote...)
			var good, eio int
			for e := range 2 {
				g, x := readEIOOrExact(t, m.part(e, 0, 1), want[e])
				good, eio = good+g, eio+x
			}
			if c.mode != rangeShortBody && eio == 0 {
				t.Fatalf("no read gave EIO while every other ranged GET was answered wrong (%d faulted)", p.faulted.Load())
			}
			// Every wrong answer is counted once, as a bad response.
			var sc s3Counters
			var bad int64
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				sc = readS3Counters(t, m)
				bad = badResponses(t, m)
				if bad == p.faulted.Load() || time.Now().After(deadline) {
					break
				}
			}
			if f := p.faulted.Load(); f == 0 || bad != f {
				t.Fatalf("the proxy answered %d ranged GETs wrong; stats.json counts %d bad responses (source %+v)", f, bad, *sc.Source)
			}
			if c.mode == rangeShortBody && sc.Source.Retries == 0 {
				t.Fatalf("source %+v: a short body is tried again, like one cut off", *sc.Source)
			}
			re := regexp.MustCompile(`S3 answer to a ranged GET refused.*object=s3://data/ranges/data-\d+-of-\d+\.tfrecord.*offset=\d+.*status=(200|206)`)
			if !m.waitLog(re, 5*time.Second) {
				t.Fatalf("no log line names a refused answer with its object, offset and status:\n%s", m.log)
			}
			// Every block read whole went to the disk cache's writer (a
			// failed read counts as a source request too).
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				st, failed := m.cacheStats(), readS3Counters(t, m).Source.Failed
				d := st.DiskCache
				if d.Written+d.WriteSkipped+d.NotAdmitted+failed >= st.SourceRequests {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the disk cache did not write what was read: %+v, %d source requests, %d failed", *d, st.SourceRequests, failed)
				}
			}
			m.stop()

			// A healthy server: what the disk cache serves is exact.
			p.set(rangeHealthy, 1)
			m2 := startMount(t, "s3://data/ranges", remote...)
			for e := range 3 {
				if got := m2.read(e, 0, 1); !bytes.Equal(got, want[e]) {
					t.Fatalf("after the faults, epoch %d: %d bytes served differ from the %d `corgifs order` lists", e, len(got), len(want[e]))
				}
			}
			if st := m2.cacheStats(); st.DiskCache.Hits == 0 {
				t.Fatalf("the later mount served nothing from the disk cache (%+v): the check above proves nothing; %d reads were good", *st.DiskCache, good)
			}
		})
	}
}

// badResponses is the bad_responses counter of the source in stats.json.
func badResponses(t *testing.T, m *mount) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dir, ".corgifs", "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Source *struct {
			BadResponses *int64 `json:"bad_responses"`
		} `json:"source"`
	}
	if err := json.Unmarshal(b, &s); err != nil || s.Source == nil || s.Source.BadResponses == nil {
		t.Fatalf("stats.json has no source.bad_responses (%v):\n%s", err, b)
	}
	return *s.Source.BadResponses
}

// A read that fails and is tried again costs one GET a try, all counted:
// the GETs the server sees are the GETs in stats.json, and every GET past
// a read's first is a retry (no retries hidden inside the S3 client).
func TestS3ReadTriedAgainMakesOneGETATryAndCountsEachExtraGETAsARetry(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 2000, 16, 4, 2, "clustered")
	s.upload("data", "retried", src)
	p := startRangeProxy(t, s)
	m := startMount(t, "s3://data/retried", "--seed", "5", "--block-size", "16KiB", "--parts", "2",
		"--s3-endpoint", p.srv.URL, "--s3-timeout", "5s")

	// quiet waits until the GETs the proxy saw since ranged0 are those
	// stats.json counts since c0 and ok holds.
	quiet := func(ranged0 int64, c0 s3Counters, ok func(gets, retries, failed int64) bool) (int64, int64, int64, int64) {
		t.Helper()
		var gets, retries, failed, seen int64
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			c := readS3Counters(t, m)
			seen = p.ranged.Load() - ranged0
			gets, retries, failed = c.Source.GETs-c0.Source.GETs, c.Source.Retries-c0.Source.Retries, c.Source.Failed-c0.Source.Failed
			if seen == gets && ok(gets, retries, failed) || time.Now().After(deadline) {
				return seen, gets, retries, failed
			}
		}
	}
	// settle waits until no GET was made for half a second (the mount's
	// prefetches done).
	settle := func() (int64, s3Counters) {
		t.Helper()
		r, c := p.ranged.Load(), readS3Counters(t, m)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			time.Sleep(500 * time.Millisecond)
			r2, c2 := p.ranged.Load(), readS3Counters(t, m)
			if r2 == r && c2.Source.GETs == c.Source.GETs {
				break
			}
			r, c = r2, c2
		}
		return r, c
	}

	// Three 503s, then a healthy server: the reads pass, and the server
	// saw one GET more than the blocks for each 503.
	r0, c0 := settle()
	p.fail503.Store(3)
	if _, err := os.ReadFile(m.part(0, 0, 2)); err != nil {
		t.Fatalf("read with three 503s, each tried again: %v\n%s", err, m.log)
	}
	seen, gets, retries, failed := quiet(r0, c0, func(_, r, _ int64) bool { return r == 3 })
	if seen != gets || retries != 3 || failed != 0 {
		t.Fatalf("three 503s: the server saw %d GETs, stats.json counts %d GETs, %d retries, %d failed reads; want as many GETs, 3 retries, none failed", seen, gets, retries, failed)
	}

	// Every GET answered 503: each read gives up after its 5 tries, 5
	// GETs at the server, 4 of them retries.
	r0, c0 = settle()
	p.fail503.Store(1 << 40)
	if _, err := os.ReadFile(m.part(0, 1, 2)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read while every GET gets 503: %v, want EIO", err)
	}
	seen, gets, retries, failed = quiet(r0, c0, func(g, r, f int64) bool { return f > 0 && g == 5*f })
	p.fail503.Store(0)
	if failed == 0 || seen != gets || gets != 5*failed || retries != 4*failed {
		t.Fatalf("every GET 503: the server saw %d GETs; stats.json counts %d GETs, %d retries, %d failed reads: want 5 GETs and 4 retries a failed read", seen, gets, retries, failed)
	}
}

// A dataset of many one-record objects costs one GET per block in an
// epoch, and no GET of a header: the index knows each block's bytes, so
// nothing is read to find them (issue 25 measured 20,277 GETs an epoch
// for 10,000 such objects). Indexing reads each object's head once.
func TestS3EpochOfOneRecordObjectsMakesOneGETPerBlockAndNoHeaderGET(t *testing.T) {
	s := startS3(t)
	const objects = 200
	src := genSynthetic(t, objects, 16, 4, objects, "clustered")
	s.upload("data", "single", src)
	p := startRangeProxy(t, s)
	m := startMount(t, "s3://data/single", "--seed", "3", "--block-size", "16KiB", "--s3-endpoint", p.srv.URL)
	if n := p.small.Load(); n > objects {
		t.Fatalf("indexing %d objects made %d GETs of a header: more than one an object", objects, n)
	}
	want := orderBytes(t, src, 0, []string{"--seed", "3", "--block-size", "16KiB"})
	quiet := func() (int64, s3Counters) {
		t.Helper()
		r, c := p.ranged.Load(), readS3Counters(t, m)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			time.Sleep(500 * time.Millisecond)
			r2, c2 := p.ranged.Load(), readS3Counters(t, m)
			if r2 == r && c2.Source.GETs == c.Source.GETs && c2.BlocksRead == c.BlocksRead {
				break
			}
			r, c = r2, c2
		}
		return r, c
	}
	r0, c0 := quiet()
	small0 := p.small.Load()
	if got := m.read(0, 0, 1); !bytes.Equal(got, want) {
		t.Fatalf("epoch 0: %d bytes served differ from the %d `corgifs order` lists", len(got), len(want))
	}
	r1, c1 := quiet()
	gets, blocks := r1-r0, c1.BlocksRead-c0.BlocksRead
	t.Logf("indexing: %d GETs of a header for %d objects; epoch 0: %d GETs, %d blocks loaded", small0, objects, gets, blocks)
	if small := p.small.Load() - small0; small != 0 || gets != blocks || blocks < objects || c1.Source.GETs-c0.Source.GETs != gets {
		t.Fatalf("an epoch of %d one-record objects: the server saw %d GETs (%d of a header) for %d blocks loaded (stats.json: %d GETs); want one GET a block, none of a header",
			objects, gets, small, blocks, c1.Source.GETs-c0.Source.GETs)
	}
}
