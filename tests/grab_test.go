package tests

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/corgifstest"
	"github.com/corgifs/corgifs/grab"
)

// idDataset writes a JSONL dataset whose record i is {"id": i}, so that a
// test reads the served order straight from the part files.
func idDataset(t *testing.T, records int) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "ids")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for f := range 2 {
		var b bytes.Buffer
		for i := f * records / 2; i < (f+1)*records/2; i++ {
			fmt.Fprintf(&b, "{\"id\": %d}\n", i)
		}
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d.jsonl", f)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// servedIDs parses the ids of a served JSONL part, in order.
func servedIDs(t *testing.T, b []byte) []int32 {
	t.Helper()
	var ids []int32
	for line := range strings.Lines(string(b)) {
		var r struct{ ID int32 }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("served line %q: %v", line, err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

const gradDim = 3

// gradient is the test trainer's vector for record id in epoch e.
func gradient(id int32, epoch int) []float32 {
	r := rand.New(rand.NewPCG(uint64(id), uint64(epoch)))
	v := make([]float32, gradDim)
	for k := range v {
		v[k] = float32(r.NormFloat64())
	}
	return v
}

// writeFeedback writes part i of k of epoch's feedback file through the
// mount, as the format says: "CGFB", version 1, dimension, 0, then
// one little-endian float32 vector per served record.
func writeFeedback(t *testing.T, d *corgifstest.Daemon, epoch, i, k int, ids []int32) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("CGFB")
	binary.Write(&b, binary.LittleEndian, []uint32{1, gradDim, 0})
	for _, id := range ids {
		binary.Write(&b, binary.LittleEndian, gradient(id, epoch))
	}
	path := filepath.Join(d.Dir, ".corgifs", "feedback", fmt.Sprintf("epoch-%04d", epoch), fmt.Sprintf("part-%05d-of-%05d.f32", i, k))
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatalf("writing %s: %v\n%s", path, err, d.Log())
	}
}

func fallbacks(t *testing.T, d *corgifstest.Daemon) int64 {
	t.Helper()
	b, err := os.ReadFile(api.StatsPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	var st api.Stats
	if err := json.Unmarshal(b, &st); err != nil || st.Feedback == nil {
		t.Fatalf("stats.json has no feedback counters (%v): %s", err, b)
	}
	return st.Feedback.Fallbacks
}

func onceEach(t *testing.T, what string, parts [][]int32, records int) {
	t.Helper()
	var all []int32
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	if len(all) != records || all[0] != 0 || all[len(all)-1] != int32(records-1) || len(slices.Compact(all)) != records {
		t.Fatalf("%s: the parts do not hold every record exactly once (%d served)", what, len(all))
	}
}

// A trainer reads each epoch through the mount and writes its per-record
// vectors back; the next epoch comes in the paper's order (GraB for grab,
// CD-GraB for cdgrab), every record exactly once, and a remount on the same
// cache directory serves the epochs already planned byte for byte.
func TestFeedbackOrdersThroughAMountFollowTheFeedbackAndSurviveARemount(t *testing.T) {
	const records, epochs = 400, 3
	src := idDataset(t, records)
	for _, c := range []struct {
		strategy string
		parts    int
	}{{"grab", 1}, {"cdgrab", 2}, {"corgipile-balance", 2}} {
		cache := filepath.Join(t.TempDir(), "cache")
		opts := []corgifstest.Option{corgifstest.Strategy(c.strategy), corgifstest.Parts(c.parts), corgifstest.CacheDir(cache),
			corgifstest.Args("--seed", "5", "--feedback-dim", "8")}
		d := corgifstest.Mount(t, src, opts...)
		files := make([][][]byte, epochs)
		for epoch := range epochs {
			served := make([][]int32, c.parts)
			for i := range c.parts {
				b, err := os.ReadFile(d.Part(epoch, i, c.parts))
				if err != nil {
					t.Fatalf("%s: %v\n%s", c.strategy, err, d.Log())
				}
				files[epoch] = append(files[epoch], b)
				served[i] = servedIDs(t, b)
			}
			onceEach(t, fmt.Sprintf("%s epoch %d", c.strategy, epoch), served, records)
			for i := range c.parts {
				writeFeedback(t, d, epoch, i, c.parts, served[i])
			}
			if epoch+1 == epochs || c.strategy == "corgipile-balance" {
				continue
			}
			if c.strategy == "grab" {
				// corgifs order, another process, prints the saved order of an
				// epoch a mount planned, and for one it has not planned yet
				// neither waits for feedback nor saves what it prints.
				printed := orderIDs(t, src, corgifs(t, "order", src, "--strategy", "grab", "--seed", "5", "--feedback-dim", "8",
					"--cache-dir", cache, "--epoch", fmt.Sprint(epoch)))
				if !slices.Equal(printed, served[0]) {
					t.Errorf("corgifs order prints another order for epoch %d than the mount served", epoch)
				}
				corgifs(t, "order", src, "--strategy", "grab", "--seed", "5", "--feedback-dim", "8",
					"--cache-dir", cache, "--epoch", fmt.Sprint(epoch+1))
			}
			// What the next epoch must be, by the package grab.
			vecs := make([][]float32, c.parts)
			for i, ids := range served {
				for _, id := range ids {
					vecs[i] = append(vecs[i], gradient(id, epoch)...)
				}
			}
			next, err := os.ReadFile(d.Part(epoch+1, 0, c.parts))
			if err != nil {
				t.Fatal(err)
			}
			var want []int32
			if c.strategy == "grab" {
				want = grab.GraB(served[0], vecs[0], gradDim, grab.Deterministic, 0)
			} else {
				want = grab.CDGraB(served, vecs, gradDim, grab.Deterministic, 0)[0]
			}
			if got := servedIDs(t, next); !slices.Equal(got, want) {
				t.Fatalf("%s epoch %d part 0 is not the balanced order of epoch %d's feedback:\n got %v\nwant %v", c.strategy, epoch+1, epoch, got, want)
			}
		}
		if n := fallbacks(t, d); n != 0 {
			t.Errorf("%s: %d fallbacks with all feedback written\n%s", c.strategy, n, d.Log())
		}
		cfg, err := os.ReadFile(filepath.Join(d.Dir, ".corgifs", "config.json"))
		if err != nil || !strings.Contains(string(cfg), `"balance_rule": "deterministic"`) {
			t.Errorf("%s: config.json does not state the balance rule (%v):\n%s", c.strategy, err, cfg)
		}
		d.Unmount()
		d2 := corgifstest.Mount(t, src, opts...)
		for epoch := range epochs {
			for i := range c.parts {
				b, err := os.ReadFile(d2.Part(epoch, i, c.parts))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, files[epoch][i]) {
					t.Errorf("%s: after a remount epoch %d part %d differs", c.strategy, epoch, i)
				}
			}
		}
		d2.Unmount()
	}
}

// An epoch opened before the previous epoch's feedback has all come is
// served after --feedback-timeout as a random reshuffle, every record
// once; the fallback is logged and counted in stats.json.
func TestFeedbackTimeoutThroughAMountServesARandomReshuffle(t *testing.T) {
	const records = 400
	src := idDataset(t, records)
	d := corgifstest.Mount(t, src, corgifstest.Strategy("cdgrab"), corgifstest.Parts(2),
		corgifstest.Args("--seed", "5", "--feedback-dim", "8", "--feedback-timeout", "300ms"))
	var e0 [][]int32
	for i := range 2 {
		e0 = append(e0, servedIDs(t, mustRead(t, d, 0, i, 2)))
	}
	writeFeedback(t, d, 0, 0, 2, e0[0]) // part 1's never comes
	var e1 [][]int32
	for i := range 2 {
		e1 = append(e1, servedIDs(t, mustRead(t, d, 1, i, 2)))
	}
	onceEach(t, "fallback epoch", e1, records)
	if slices.Equal(e1[0], e0[0]) {
		t.Error("the fallback epoch repeats epoch 0's order")
	}
	if n := fallbacks(t, d); n != 1 {
		t.Errorf("stats.json counts %d fallbacks, want 1\n%s", n, d.Log())
	}
	if log, ok := awaitLog(d.Log, hasAll("did not arrive in time")); !ok {
		t.Errorf("the fallback is not logged\n%s", log)
	}
}

func mustRead(t *testing.T, d *corgifstest.Daemon, epoch, i, k int) []byte {
	t.Helper()
	b, err := os.ReadFile(d.Part(epoch, i, k))
	if err != nil {
		t.Fatalf("epoch %d part %d of %d: %v\n%s", epoch, i, k, err, d.Log())
	}
	return b
}

// orderIDs maps the lines of corgifs order ("file offset length") of a
// dataset made by idDataset to the records' ids.
func orderIDs(t *testing.T, src, out string) []int32 {
	t.Helper()
	var ids []int32
	for line := range strings.Lines(out) {
		var file string
		var off, n int64
		if _, err := fmt.Sscan(line, &file, &off, &n); err != nil {
			t.Fatalf("corgifs order line %q: %v", line, err)
		}
		b, err := os.ReadFile(filepath.Join(src, file))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, servedIDs(t, b[off:off+n])...)
	}
	return ids
}

// The feedback strategies' flags are refused with the other strategies,
// and bad values are refused, saying what is wanted.
func TestBalanceFlagsGiveClearErrors(t *testing.T) {
	src := idDataset(t, 20)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--balance-rule", "randomized"}, "--balance-rule applies to --strategy grab, cdgrab and corgipile-balance only"},
		{[]string{"--strategy", "full", "--feedback-timeout", "5s"}, "--feedback-timeout applies to --strategy grab, cdgrab and corgipile-balance only"},
		{[]string{"--strategy", "grab", "--balance-rule", "greedy"}, "want deterministic or randomized"},
		{[]string{"--strategy", "cdgrab", "--feedback-timeout", "-1s"}, "want a positive duration"},
	}
	for _, c := range cases {
		args := append([]string{"order", src, "--seed", "1", "--cache-dir", t.TempDir()}, c.args...)
		_, stderr, code := run(args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("corgifs %s: exit %d, stderr %q; want an error containing %q", strings.Join(args, " "), code, stderr, c.want)
		}
	}
}

// SIGTERM while an open waits for feedback unmounts within the stop
// timeout (20 s), not after --feedback-timeout.
func TestSIGTERMWhileAnOpenWaitsForFeedbackUnmounts(t *testing.T) {
	src := idDataset(t, 200)
	d := corgifstest.Mount(t, src, corgifstest.Strategy("grab"),
		corgifstest.Args("--seed", "5", "--feedback-dim", "8", "--feedback-timeout", "10m"))
	mustRead(t, d, 0, 0, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		os.ReadFile(d.Part(1, 0, 1)) // waits for epoch 0's feedback; fails or not at unmount
	}()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(d.Log(), "waiting for the previous epoch's feedback"); {
		if time.Now().After(deadline) {
			t.Fatalf("the open of epoch 1 does not wait for feedback\n%s", d.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.Unmount() // fails the test unless the daemon exits 0 within the stop timeout
	<-done
}
