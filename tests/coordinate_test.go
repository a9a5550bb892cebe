package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/corgifstest"
	"github.com/corgifs/corgifs/feedback"
	"github.com/minio/minio-go/v7"
)

// coordNodes mounts src on nodes daemons that share the directory dir
// with --coordinate, rank i on node i with the cache directory caches[i].
func coordNodes(t *testing.T, src, dir string, nodes, parts int, args ...string) (ds []*corgifstest.Daemon, caches []string) {
	t.Helper()
	for i := range nodes {
		caches = append(caches, filepath.Join(t.TempDir(), "cache"))
		ds = append(ds, coordNode(t, src, dir, i, parts, caches[i], args...))
	}
	return ds, caches
}

// coordNode mounts src as the node of rank with the cache directory cache.
func coordNode(t *testing.T, src, dir string, rank, parts int, cache string, args ...string) *corgifstest.Daemon {
	t.Helper()
	a := append([]string{"--seed", "5", "--feedback-dim", "8", "--coordinate", dir, "--coordinate-rank", strconv.Itoa(rank)}, args...)
	return corgifstest.Mount(t, src, corgifstest.Strategy("cdgrab"), corgifstest.Parts(parts), corgifstest.CacheDir(cache), corgifstest.Args(a...))
}

// readOwnParts has node i read part i of epoch, all at once (a follower's
// open waits for the decision the order server takes).
func readOwnParts(t *testing.T, ds []*corgifstest.Daemon, epoch int) [][]byte {
	t.Helper()
	out := make([][]byte, len(ds))
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Go(func() { out[i], errs[i] = os.ReadFile(d.Part(epoch, i, len(ds))) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d, epoch %d part %d: %v\n%s", i, epoch, i, err, ds[i].Log())
		}
	}
	return out
}

// sharedPlace reads a name of the place the nodes share.
type sharedPlace func(name string) ([]byte, error)

func sharedDir(dir string) sharedPlace {
	return func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
}

// sharedJSON reads a JSON file of the shared place.
func sharedJSON[T any](t *testing.T, read sharedPlace, name string) T {
	t.Helper()
	var v T
	b, err := read(name)
	if err != nil {
		t.Fatalf("shared %s: %v", name, err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("shared %s: %v\n%s", name, err, b)
	}
	return v
}

type sharedDecision struct {
	Balanced bool
	Reason   string
	Digest   string
	Rank     int
}

// sameDigests checks that every node published the decision's digest
// for epoch, and returns the decision.
func sameDigests(t *testing.T, read sharedPlace, epoch, nodes, parts int) sharedDecision {
	t.Helper()
	d := sharedJSON[sharedDecision](t, read, fmt.Sprintf("epoch-%04d/decision-of-%05d.json", epoch, parts))
	for r := range nodes {
		nd := sharedJSON[struct{ Digest string }](t, read, fmt.Sprintf("epoch-%04d/digest-of-%05d-rank-%05d.json", epoch, parts, r))
		if nd.Digest != d.Digest {
			t.Errorf("epoch %d: rank %d serves digest %s, the decision is %s", epoch, r, nd.Digest, d.Digest)
		}
	}
	return d
}

func nodeStatus(t *testing.T, d *corgifstest.Daemon) feedback.CoordinateStatus {
	t.Helper()
	b, err := os.ReadFile(api.StatusPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := json.Unmarshal(b, &st); err != nil || st.Coordinate == nil {
		t.Fatalf("status.json has no coordinate object (%v):\n%s", err, b)
	}
	return *st.Coordinate
}

// Four daemons, each on its own mount and cache directory, share one
// --coordinate directory; each rank reads only its part and writes only
// its part's feedback. Every epoch is decided once and balanced (no
// fallback), every node serves the decision's digest, each epoch holds
// every record exactly once, and every part is byte for byte what one
// mount fed all four parts' feedback serves. The bytes each node moves
// through the shared directory are those docs/coordinate.md states.
func TestCoordinatedNodesServeTheOrdersOfOneMountFedAllFeedback(t *testing.T) {
	for _, strategy := range []string{"cdgrab", "grab", "corgipile-balance"} {
		t.Run(strategy, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shared")
			coordinatedRun(t, dir, sharedDir(dir), strategy)
		})
	}
}

// The same through a bucket of a real S3 server (versitygw): write-once
// names by conditional PUT (If-None-Match: *).
func TestCoordinatedNodesThroughS3ServeTheOrdersOfOneMountFedAllFeedback(t *testing.T) {
	s := startS3(t)
	ctx := context.Background()
	if err := s.client.MakeBucket(ctx, "coord", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	coordinatedRun(t, "s3://coord/run-1", func(name string) ([]byte, error) {
		o, err := s.client.GetObject(ctx, "coord", "run-1/"+name, minio.GetObjectOptions{})
		if err != nil {
			return nil, err
		}
		defer o.Close()
		return io.ReadAll(o)
	}, "cdgrab", "--s3-endpoint", s.endpoint)
	// The server refuses a second conditional PUT of a key.
	opts := minio.PutObjectOptions{DisableMultipart: true}
	opts.SetMatchETagExcept("*")
	_, err := s.client.PutObject(ctx, "coord", "run-1/epoch-0001/decision-of-00004.json", bytes.NewReader([]byte("{}")), 2, opts)
	if er := minio.ToErrorResponse(err); er.StatusCode != 412 {
		t.Errorf("a conditional PUT over the decision: %v, want 412 Precondition Failed", err)
	}
}

// coordinatedRun runs 4 nodes sharing coordinate for 3 epochs against one
// mount fed every part's feedback (see the test above).
func coordinatedRun(t *testing.T, coordinate string, read sharedPlace, strategy string, args ...string) {
	t.Helper()
	const nodes, epochs, dim = 4, 3, gradDim
	// CORGIFS_COORD_RECORDS=1000000 measures the bytes of
	// docs/coordinate.md at N = 10⁶.
	records := 2000
	if n, err := strconv.Atoi(os.Getenv("CORGIFS_COORD_RECORDS")); err == nil && n > 0 {
		records = n
	}
	src := idDataset(t, records)
	dir := coordinate
	args = append([]string{"--strategy", strategy, "--feedback-timeout", "60s"}, args...)
	ds, caches := coordNodes(t, src, dir, nodes, nodes, args...)
	one := corgifstest.Mount(t, src, corgifstest.Strategy(strategy), corgifstest.Parts(nodes), corgifstest.Args("--seed", "5", "--feedback-dim", "8"))
	var before []feedback.CoordinateStatus
	var prev [][]int32              // the records of the previous epoch's parts
	files := make([][]byte, epochs) // node 1's
	for epoch := range epochs {
		got := readOwnParts(t, ds, epoch)
		files[epoch] = got[1]
		served := make([][]int32, nodes)
		for i := range nodes {
			want := mustRead(t, one, epoch, i, nodes)
			if !bytes.Equal(got[i], want) {
				t.Fatalf("epoch %d part %d: node %d serves other bytes than one mount fed every part's feedback\n%s", epoch, i, i, ds[i].Log())
			}
			served[i] = servedIDs(t, got[i])
		}
		onceEach(t, fmt.Sprintf("epoch %d across the nodes", epoch), served, records)
		if epoch > 0 {
			if d := sameDigests(t, read, epoch, nodes, nodes); !d.Balanced || d.Rank != 0 {
				t.Errorf("epoch %d: decision %+v, want balanced by rank 0", epoch, d)
			}
			after := make([]feedback.CoordinateStatus, nodes)
			for i := range nodes {
				after[i] = nodeStatus(t, ds[i])
				w, r := after[i].BytesWritten-before[i].BytesWritten, after[i].BytesRead-before[i].BytesRead
				t.Logf("epoch %d rank %d (%s, %d records in epoch %d): %d bytes written, %d read in the shared directory", epoch, i, after[i].Role, len(prev[i]), epoch-1, w, r)
				// Own feedback (header and one vector of dim float32 per
				// record) plus a digest (under 1 KiB); the order server also
				// writes the orders (4 bytes a record, 8 + 4 a part) and the
				// decision, and reads the other parts' feedback; the others
				// read the decision and the orders.
				fb := int64(16 + len(prev[i])*dim*4) // the previous epoch's feedback
				orders := int64(8 + 4*nodes + 4*records)
				wantW, wantR := fb, orders
				if i == 0 {
					wantW, wantR = fb+orders, int64(records-len(prev[0]))*dim*4+16*(nodes-1)
				}
				if w < wantW || w > wantW+2048 || r < wantR || r > wantR+2048 {
					t.Errorf("epoch %d rank %d moved %d bytes out and %d in, want %d and %d (plus under 2 KiB of JSON)", epoch, i, w, r, wantW, wantR)
				}
			}
			before = after
		}
		if epoch == 0 {
			// Each epoch's bytes: from before the previous epoch's
			// feedback is written to after the epoch is read.
			before = make([]feedback.CoordinateStatus, nodes)
			for i := range nodes {
				before[i] = nodeStatus(t, ds[i])
			}
		}
		for i := range nodes {
			writeFeedback(t, ds[i], epoch, i, nodes, served[i])
			writeFeedback(t, one, epoch, i, nodes, served[i])
		}
		prev = served
	}
	for i, d := range ds {
		if n := fallbacks(t, d); n != 0 {
			t.Errorf("node %d: %d fallbacks\n%s", i, n, d.Log())
		}
	}
	// A remount of node 1 on its cache directory serves its saved orders,
	// which are the decisions'.
	ds[1].Unmount()
	again := coordNode(t, src, dir, 1, nodes, caches[1], args...)
	for epoch := range epochs {
		if b := mustRead(t, again, epoch, 1, nodes); !bytes.Equal(b, files[epoch]) {
			t.Errorf("after a remount node 1 serves other bytes for epoch %d\n%s", epoch, again.Log())
		}
	}
}

// When one rank never writes its feedback, every node falls back
// together: one decision, balanced=false, taken once, which every node
// follows with the same digest; meanwhile status.json says what each node
// waits for. A node whose orders differ from the decision (another seed)
// refuses to serve the epoch (EIO) and logs both digests.
func TestCoordinatedNodesFallBackTogetherWhenOneRankIsLate(t *testing.T) {
	const records, nodes = 400, 4
	src := idDataset(t, records)
	dir := filepath.Join(t.TempDir(), "shared")
	ds, _ := coordNodes(t, src, dir, nodes, nodes, "--feedback-timeout", "4s")
	got := readOwnParts(t, ds, 0)
	for i := range nodes - 1 { // rank 3 is late: it never writes
		writeFeedback(t, ds[i], 0, i, nodes, servedIDs(t, got[i]))
	}
	var e1 [][]byte
	done := make(chan struct{})
	go func() { defer close(done); e1 = readOwnParts(t, ds, 1) }()
	time.Sleep(time.Second)
	for i, d := range ds {
		st := nodeStatus(t, d)
		want := "decision"
		if i == 0 {
			want = "feedback"
		}
		if len(st.Waiting) != 1 || st.Waiting[0].Epoch != 1 || st.Waiting[0].For != want || (i == 0 && !slices.Equal(st.Waiting[0].MissingParts, []int{3})) {
			t.Errorf("rank %d: status.json says it waits for %+v, want epoch 1's %s (missing part 3 on rank 0)", i, st.Waiting, want)
		}
	}
	<-done
	served := make([][]int32, nodes)
	for i := range nodes {
		served[i] = servedIDs(t, e1[i])
	}
	onceEach(t, "the fallback epoch across the nodes", served, records)
	d := sameDigests(t, sharedDir(dir), 1, nodes, nodes)
	if d.Balanced {
		t.Errorf("epoch 1 decided balanced with part 3's feedback missing: %+v", d)
	}
	for i, dm := range ds {
		if n := fallbacks(t, dm); n != 1 {
			t.Errorf("node %d counts %d fallbacks, want 1\n%s", i, n, dm.Log())
		}
	}
	names, _ := filepath.Glob(filepath.Join(dir, "epoch-0001", "decision*"))
	if len(names) != 1 {
		t.Errorf("epoch 1 has decisions %v, want one", names)
	}

	// A fifth node with another seed cannot serve the decided epoch.
	odd := corgifstest.Mount(t, src, corgifstest.Strategy("cdgrab"), corgifstest.Parts(nodes),
		corgifstest.Args("--seed", "6", "--feedback-dim", "8", "--coordinate", dir, "--coordinate-rank", "4"))
	if _, err := os.ReadFile(odd.Part(1, 0, nodes)); err == nil {
		t.Errorf("a node whose orders differ from the decision served epoch 1\n%s", odd.Log())
	}
	if log, ok := awaitLog(odd.Log, hasAll("refusing to serve", "node_digest", "decision_digest="+d.Digest)); !ok {
		t.Errorf("the refusal does not name both digests\n%s", log)
	}
}

// --coordinate is refused where it cannot apply, with what to do.
func TestCoordinateFlagsGiveClearErrors(t *testing.T) {
	src := idDataset(t, 40)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--strategy", "corgipile", "--coordinate", t.TempDir(), "--coordinate-rank", "0"}, "--coordinate applies to --strategy grab, cdgrab and corgipile-balance only"},
		{[]string{"--strategy", "cdgrab", "--coordinate", t.TempDir()}, "needs --coordinate-rank N"},
		{[]string{"--strategy", "cdgrab", "--coordinate-rank", "0"}, "--coordinate-rank 0 needs --coordinate DIR"},
		{[]string{"--strategy", "cdgrab", "--coordinate", "gs://b/p", "--coordinate-rank", "0"}, "want a directory or s3://bucket/prefix"},
	} {
		_, stderr, code := run(append([]string{"mount", src, t.TempDir(), "--cache-dir", t.TempDir()}, c.args...)...)
		if code == 0 || !bytes.Contains([]byte(stderr), []byte(c.want)) {
			t.Errorf("corgifs mount %v: exit %d\n%s\nwant an error saying %q", c.args, code, stderr, c.want)
		}
	}
}
