package tests

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/internal/testenv"
)

// getCounter is an HTTP proxy in front of an S3 server that counts the
// GETs of objects (not listings): the requests a disk cache saves.
type getCounter struct {
	srv  *httptest.Server
	gets atomic.Int64
}

func startGETCounter(t *testing.T, target string) *getCounter {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	g := &getCounter{}
	rp := httputil.NewSingleHostReverseProxy(u)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Path style: /bucket/key. A listing is /bucket?list-type=2.
		if r.Method == http.MethodGet && strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1 {
			g.gets.Add(1)
		}
		rp.ServeHTTP(w, r) // the Host header stays the proxy's, which the request was signed for
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (m *mount) cacheStats() api.Stats {
	m.t.Helper()
	b, err := os.ReadFile(api.StatsPath(m.dir))
	if err != nil {
		m.t.Fatalf("stats.json: %v\n%s", err, m.log)
	}
	var s api.Stats
	if err := json.Unmarshal(b, &s); err != nil {
		m.t.Fatalf("stats.json: %v\n%s", err, b)
	}
	if s.DiskCache == nil {
		m.t.Fatalf("stats.json has no disk_cache:\n%s", b)
	}
	return s
}

// settled waits until every block read from the source went to the disk
// cache's writer and was written or turned away.
func (m *mount) settled() api.Stats {
	m.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := m.cacheStats()
		d := s.DiskCache
		if d.Written+d.WriteSkipped+d.NotAdmitted >= s.SourceRequests+s.WalkTaken || d.Disabled != "" {
			return s
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("the disk cache did not write what was read: %+v, %d source requests", *d, s.SourceRequests)
		}
	}
}

// sameEpoch fails unless m serves epoch's part 0 of 1 as want does.
func sameEpoch(t *testing.T, m, want *mount, epoch int) {
	t.Helper()
	if got, w := m.read(epoch, 0, 1), want.read(epoch, 0, 1); !bytes.Equal(got, w) {
		t.Fatalf("epoch %d: %d bytes served through the disk cache differ from the %d of a mount of the local directory", epoch, len(got), len(w))
	}
}

func TestS3DiskCacheServesLaterEpochsAndRemountsWithoutGETsAndRefetchesDamagedEntries(t *testing.T) {
	s := startS3(t)
	src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
	s.upload("data", "cached", src)
	p := startGETCounter(t, s.addr)
	flags := []string{"--seed", "11", "--block-size", "16KiB"}
	local := startMount(t, src, flags...)
	dc := filepath.Join(t.TempDir(), "disk-cache")
	// One --cache-dir for both mounts, as for a user: the second keeps the
	// first's probed index and its record-chain proofs (no walk GETs).
	remote := append(slices.Clone(flags), "--s3-endpoint", p.srv.URL, "--cache-dir", filepath.Join(t.TempDir(), "cache"))

	m := startMount(t, "s3://data/cached", append(slices.Clone(remote), "--disk-cache", dc)...)
	sameEpoch(t, m, local, 0)
	st := m.settled()
	if st.DiskCache.Written == 0 || st.DiskCache.Written != st.SourceRequests+st.WalkTaken {
		t.Fatalf("epoch 0 fetched %d blocks and cached %d, want all", st.SourceRequests, st.DiskCache.Written)
	}
	before := p.gets.Load()
	sameEpoch(t, m, local, 1)
	if n := p.gets.Load() - before; n != 0 {
		t.Fatalf("epoch 1 made %d GETs, want none: every block is in the disk cache", n)
	}
	st = m.cacheStats()
	if e := st.Epochs[1]; e.SourceBytes != 0 || e.DiskCacheBytes == 0 {
		t.Fatalf("stats.json epoch 1: %+v, want no source bytes and bytes from the disk cache", e)
	}
	m.stop()

	// Damage two entries: a flipped byte, a cut-off end.
	entries, _ := filepath.Glob(filepath.Join(dc, "b*"))
	slices.Sort(entries)
	if len(entries) < 2 {
		t.Fatalf("%d entries in the disk cache", len(entries))
	}
	b, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-100] ^= 1
	if err := os.WriteFile(entries[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(entries[1], 40); err != nil {
		t.Fatal(err)
	}

	// A remount with the same directory fetches only the damaged blocks.
	m2 := startMount(t, "s3://data/cached", append(slices.Clone(remote), "--disk-cache", dc)...)
	before = p.gets.Load()
	sameEpoch(t, m2, local, 2)
	// One GET for each damaged entry's block, or one for both where they
	// are adjacent blocks of one object (one run, blockcache/runs.go).
	if n, want := p.gets.Load()-before, damagedRuns(t, m2.log.String()); n != want {
		t.Fatalf("epoch 2 after a remount made %d GETs, want %d (the damaged entries' blocks, a GET a run of adjacent ones)\n%s", n, want, m2.log)
	}
	if n := m2.logCount("disk cache entry damaged", 2); n != 2 {
		t.Fatalf("%d log lines about damaged entries, want 2:\n%s", n, m2.log)
	}
	if d := m2.settled().DiskCache; d.Damaged != 2 {
		t.Fatalf("stats.json: %d damaged entries, want 2", d.Damaged)
	}
	m2.stop()

	// A cache that holds about a third of the dataset serves correct
	// epochs, and some of their bytes.
	var total int64
	files, _ := filepath.Glob(filepath.Join(src, "*"))
	for _, f := range files {
		fi, _ := os.Stat(f)
		total += fi.Size()
	}
	small := filepath.Join(t.TempDir(), "small")
	m3 := startMount(t, "s3://data/cached", append(slices.Clone(remote), "--disk-cache", small, "--disk-cache-size", fmt.Sprint(total/3))...)
	want := sortedHashes(sourceRecords(t, src))
	for e := range 3 {
		sameEpoch(t, m3, local, e)
		if got := sortedHashes(hashes(frames(t, m3.read(e, 0, 1)))); !slices.Equal(got, want) {
			t.Fatalf("small cache, epoch %d: %d records served, not every source record exactly once (%d)", e, len(got), len(want))
		}
		m3.settled()
	}
	st = m3.cacheStats()
	d := st.DiskCache
	if d.PeakHeld > d.MaxBytes || d.Evictions+d.NotAdmitted == 0 {
		t.Fatalf("small cache: %+v, want a peak within max_bytes and blocks turned away", *d)
	}
	if e := st.Epochs[2]; e.DiskCacheBytes == 0 || e.SourceBytes == 0 {
		t.Fatalf("small cache, epoch 2: %+v, want bytes from both the source and the disk cache", e)
	}
}

func TestLocalSourceDiskCacheServesTheSecondEpochFromDisk(t *testing.T) {
	src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
	flags := []string{"--seed", "4", "--block-size", "16KiB"}
	plain := startMount(t, src, flags...)
	m := startMount(t, src, append(slices.Clone(flags), "--disk-cache", filepath.Join(t.TempDir(), "dc"))...)
	sameEpoch(t, m, plain, 0)
	st := m.settled()
	sameEpoch(t, m, plain, 1)
	st2 := m.cacheStats()
	if n := st2.SourceRequests - st.SourceRequests; n != 0 {
		t.Fatalf("epoch 1 read the source %d times, want none", n)
	}
	if e0, e1 := st2.Epochs[0], st2.Epochs[1]; e1.SourceBytes != 0 || e1.DiskCacheBytes != e0.SourceBytes {
		t.Fatalf("stats.json epochs: 0 %+v, 1 %+v: want epoch 1's bytes all from the disk cache, as many as epoch 0 read from the source", e0, e1)
	}
}

// tmpfs mounts a tmpfs with options opts at dir; it is unmounted at the
// end of the test, after the corgifs mounts started later. Only root can
// mount one, so other users skip; as root (CI runs as root) a mount that
// fails is a missing component, which fails under CI=true.
func tmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Missing(t, "cannot mount a tmpfs as root (mount(8), tmpfs in the kernel): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
}

func TestDiskCacheThatIsFullReadOnlyOrNotADirectoryDegradesToNoCachingWithOneLogLine(t *testing.T) {
	src := genSynthetic(t, 3000, 16, 4, 4, "clustered")
	flags := []string{"--seed", "8", "--block-size", "16KiB"}
	plain := startMount(t, src, flags...)
	for _, c := range []struct{ name, opts, line string }{
		{"full", "size=64k,mode=0700", "file system is full"},
		{"read-only", "ro,size=1m,mode=0700", "cannot be written"},
		{"not a directory", "", "disk cache disabled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "dc")
			if c.opts != "" {
				tmpfs(t, dir, c.opts)
			} else {
				// Beneath a regular file: it cannot be created.
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				dir = filepath.Join(dir, "cache")
			}
			m := startMount(t, src, append(slices.Clone(flags), "--disk-cache", dir, "--disk-cache-size", "1GiB")...)
			for e := range 2 {
				sameEpoch(t, m, plain, e)
			}
			st := m.settled()
			if st.DiskCache.Disabled == "" {
				t.Fatalf("stats.json does not say the disk cache stopped: %+v", *st.DiskCache)
			}
			if n := m.logCount(c.line, 1); n != 1 {
				t.Fatalf("%d log lines saying %q, want 1:\n%s", n, c.line, m.log)
			}
		})
	}
}

func TestDiskCacheFlagsRefuseADirectoryInsideTheMountPointAndABadSize(t *testing.T) {
	fuseOK(t)
	src := genSynthetic(t, 200, 4, 2, 1, "clustered")
	mnt := t.TempDir()
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--disk-cache", filepath.Join(mnt, "dc")}, "is inside the mount point"},
		{[]string{"--disk-cache", filepath.Join(t.TempDir(), "dc"), "--disk-cache-size", "150%"}, "want a percentage"},
		{[]string{"--disk-cache", filepath.Join(src, "dc")}, "inside the source"},
	} {
		cmd := exec.Command(bin, append([]string{"mount", src, mnt, "--cache-dir", t.TempDir()}, c.flags...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("mount %v: %v, want an error saying %q:\n%s", c.flags, err, c.want, out)
		}
		if mounted(mnt) {
			exec.Command("umount", "-l", mnt).Run()
			t.Fatalf("mount %v left a mount behind", c.flags)
		}
	}
}

// damagedRuns is how many runs of adjacent blocks of one object the
// damaged disk-cache entries that log names hold.
func damagedRuns(t *testing.T, log string) int64 {
	t.Helper()
	type blk struct {
		file      string
		off, size int64
	}
	var bs []blk
	re := regexp.MustCompile(`disk cache entry damaged.* file=(\S+) offset=(\d+) bytes=(\d+)`)
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		off, _ := strconv.ParseInt(m[2], 10, 64)
		size, _ := strconv.ParseInt(m[3], 10, 64)
		bs = append(bs, blk{m[1], off, size})
	}
	slices.SortFunc(bs, func(a, b blk) int { return cmp.Or(strings.Compare(a.file, b.file), cmp.Compare(a.off, b.off)) })
	var runs int64
	for i, b := range bs {
		if i == 0 || bs[i-1].file != b.file || bs[i-1].off+bs[i-1].size != b.off {
			runs++
		}
	}
	return runs
}
