package feedback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDirSharedCreateWritesANameOnceAndWhole(t *testing.T) {
	sh, err := OpenDirShared(filepath.Join(t.TempDir(), "shared"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var won atomic.Int32
	var winner atomic.Value
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			body := bytes.Repeat([]byte{byte('a' + i)}, 1<<20)
			err := sh.Create(ctx, "epoch-0001/decision-of-00004.json", bytes.NewReader(body), int64(len(body)))
			switch {
			case err == nil:
				won.Add(1)
				winner.Store(body)
			case !errors.Is(err, fs.ErrExist):
				t.Errorf("writer %d: %v, want success or fs.ErrExist", i, err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d writers created the name, want exactly 1", won.Load())
	}
	rc, err := sh.Open(ctx, "epoch-0001/decision-of-00004.json")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, winner.Load().([]byte)) {
		t.Error("the name does not hold the winner's bytes whole")
	}
	names, err := sh.List(ctx, "epoch-0001")
	if err != nil || !slices.Equal(names, []string{"decision-of-00004.json"}) {
		t.Errorf("List = %v, %v; want only the name (no staged files left)", names, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(sh.String(), "epoch-0001")); len(ents) != 1 {
		t.Errorf("the directory holds %d entries, want 1: staged files left behind", len(ents))
	}
	if _, err := sh.Open(ctx, "epoch-0002/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a missing name: %v, want fs.ErrNotExist", err)
	}
	if err := sh.Create(ctx, "../escape", strings.NewReader("x"), 1); err == nil {
		t.Error("a name leaving the directory was created")
	}
}

// node is a Store coordinating through sh as rank.
func node(t *testing.T, sh Shared, rank int) *Coordinator {
	t.Helper()
	s, _ := newStore(t, Options{Records: 8, Dim: 4})
	c, err := s.Coordinate(CoordinateOptions{Shared: sh, Rank: rank, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func reshuffleOf(seed int32) func(bool) [][]int32 {
	return func(balanced bool) [][]int32 {
		if balanced {
			panic("compute(true) without every part's feedback")
		}
		return [][]int32{{(seed + 1) % 4, seed % 4, 2, 3}, {4, 5, 6, 7}}
	}
}

// Nodes whose waits end together take the fallback once: one decision,
// and every node returns its orders; a node that computes other orders
// than the decision's refuses, naming both digests.
func TestDecideTakesTheFallbackOnceAmongRacingNodes(t *testing.T) {
	sh, err := OpenDirShared(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 6
	digests := make([]string, nodes)
	var wg sync.WaitGroup
	for r := range nodes {
		c := node(t, sh, r+1) // no order server: every node times out
		wg.Go(func() {
			orders, balanced, fromSaved, err := c.Decide(context.Background(), 1, 2, 20*time.Millisecond, nil, nil, reshuffleOf(0))
			if err != nil || balanced || fromSaved {
				t.Errorf("rank %d: balanced %v, saved %v, err %v", r+1, balanced, fromSaved, err)
				return
			}
			digests[r] = Digest(orders)
		})
	}
	wg.Wait()
	for r, d := range digests {
		if d != digests[0] {
			t.Errorf("rank %d follows %s, rank 1 %s", r+1, d, digests[0])
		}
	}
	names, _ := sh.List(context.Background(), "epoch-0001")
	if n := slices.IndexFunc(names, func(s string) bool { return strings.HasPrefix(s, "decision") }); n < 0 || len(names) != nodes+1 {
		t.Errorf("epoch-0001 holds %v, want one decision and %d digests", names, nodes)
	}
	late := node(t, sh, 9)
	if _, _, _, err := late.Decide(context.Background(), 1, 2, time.Second, nil, nil, reshuffleOf(1)); err == nil ||
		!strings.Contains(err.Error(), digests[0]) || !strings.Contains(err.Error(), Digest(reshuffleOf(1)(false))) {
		t.Errorf("a node with other orders: %v, want a refusal naming both digests", err)
	}
}

// The order server computes the balanced orders once it holds every
// part's feedback (its own, and the others' from the shared place); the
// other node serves the same orders, and a remount's saved orders are
// served when they are the decision's.
func TestDecideFollowsTheOrderServersBalancedOrders(t *testing.T) {
	sh, err := OpenDirShared(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	server, follower := node(t, sh, 0), node(t, sh, 1)
	served := [][]int32{{3, 1, 0, 2}, {7, 5, 4, 6}}
	if err := upload(t, follower.Store, 0, 1, 2, served[1], file(Magic, 1, 4, 0, vectors(4, 4, 2)), 5, false); err != nil {
		t.Fatal(err)
	}
	if err := upload(t, server.Store, 0, 0, 2, served[0], file(Magic, 1, 4, 0, vectors(4, 4, 1)), 16, false); err != nil {
		t.Fatal(err)
	}
	balanced := [][]int32{{0, 1, 2, 3}, {7, 6, 5, 4}}
	var computed atomic.Int32
	compute := func(b bool) [][]int32 {
		if !b {
			return reshuffleOf(0)(false)
		}
		computed.Add(1)
		if !server.Store.Complete(0, 2) {
			t.Error("balanced orders computed before the store held every part")
		}
		return balanced
	}
	var wg sync.WaitGroup
	var got [2][][]int32
	wg.Go(func() {
		o, b, _, err := follower.Decide(context.Background(), 1, 2, 10*time.Second, nil, nil, reshuffleOf(0))
		if err != nil || !b {
			t.Errorf("follower: balanced %v, %v", b, err)
		}
		got[1] = o
	})
	wg.Go(func() {
		o, b, _, err := server.Decide(context.Background(), 1, 2, 10*time.Second, nil, func(part int) ([]int32, error) {
			return served[part], nil
		}, compute)
		if err != nil || !b {
			t.Errorf("server: balanced %v, %v", b, err)
		}
		got[0] = o
	})
	wg.Wait()
	if computed.Load() != 1 || Digest(got[0]) != Digest(balanced) || Digest(got[1]) != Digest(balanced) {
		t.Fatalf("computed %d times; server %v, follower %v, want %v", computed.Load(), got[0], got[1], balanced)
	}
	ids, vecs, _, ok := server.Store.Epoch(0, 1, 2)
	if !ok || !slices.Equal(ids, served[1]) || fmt.Sprint(vecs[:4]) != fmt.Sprint(vectors(4, 4, 2)[0]) {
		t.Errorf("the server's store does not hold the follower's part as it wrote it: %v %v", ids, vecs)
	}
	o, _, fromSaved, err := follower.Decide(context.Background(), 1, 2, time.Second, balanced, nil, reshuffleOf(0))
	if err != nil || !fromSaved || Digest(o) != Digest(balanced) {
		t.Errorf("saved orders equal to the decision's: saved %v, %v", fromSaved, err)
	}
	if _, _, _, err := follower.Decide(context.Background(), 1, 2, time.Second, reshuffleOf(0)(false), nil, reshuffleOf(0)); err == nil {
		t.Error("saved orders other than the decision's were served")
	}
	st := follower.Status().Coordinate
	if st == nil || st.Role != "follower" || st.PartsPublished != 1 || len(st.Decisions) == 0 || st.BytesRead == 0 {
		t.Errorf("status: %+v", st)
	}
}

// flaky is a shared place whose opens fail while fails is above 0.
type flaky struct {
	Shared
	fails atomic.Int32
}

func (f *flaky) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, errors.New("connection reset by peer")
	}
	return f.Shared.Open(ctx, name)
}

// A shared place that fails for a while delays the decision, never
// refuses it; one that keeps failing refuses the epoch after twice the
// timeout, naming the cause.
func TestDecideRetriesASharedPlaceThatFails(t *testing.T) {
	dir, err := OpenDirShared(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	first := node(t, dir, 1)
	want, _, _, err := first.Decide(context.Background(), 1, 2, time.Millisecond, nil, nil, reshuffleOf(0))
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Shared: dir}
	f.fails.Store(5)
	c := node(t, f, 2)
	got, _, _, err := c.Decide(context.Background(), 1, 2, time.Second, nil, nil, reshuffleOf(0))
	if err != nil || Digest(got) != Digest(want) {
		t.Fatalf("through a place failing 5 times: %v, %v", got, err)
	}
	f.fails.Store(1 << 30)
	c = node(t, f, 3)
	start := time.Now()
	if _, _, _, err := c.Decide(context.Background(), 1, 2, 50*time.Millisecond, nil, nil, reshuffleOf(0)); err == nil ||
		!strings.Contains(err.Error(), "connection reset") || time.Since(start) < 100*time.Millisecond {
		t.Errorf("through a place that keeps failing: %v after %s, want the cause after twice the timeout", err, time.Since(start))
	}
}
