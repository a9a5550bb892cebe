package tests

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/internal/childmount"
)

// feedbackMount mounts src taking feedback files (--strategy grab).
func feedbackMount(t *testing.T, src string, flags ...string) *mount {
	t.Helper()
	return startMount(t, src, append([]string{"--strategy", "grab"}, flags...)...)
}

// feedbackFile returns a feedback file: the header fields, then n vectors
// of dim values.
func feedbackFile(magic string, version, dim uint32, n int) []byte {
	b := []byte(magic)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint32(b, dim)
	b = binary.LittleEndian.AppendUint32(b, 0)
	for i := range n * int(dim) {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(i%7)-3))
	}
	return b
}

// logSays waits for the daemon's log, which a goroutine of the test copies
// from a pipe, to say s; false if it did not within 10 s.
func logSays(m *mount, s string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(m.log.String(), s) {
			return true
		}
	}
	return false
}

func readFeedbackStatus(t *testing.T, m *mount) api.Status {
	t.Helper()
	b, err := os.ReadFile(api.StatusPath(m.dir))
	if err != nil {
		t.Fatalf("status.json: %v\n%s", err, m.log)
	}
	var st api.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("status.json: %v\n%s", err, b)
	}
	return st
}

// TestAFeedbackMountChangesNothingButFeedbackFiles: a mount that takes
// feedback is read-write for the kernel, so every other change must be
// refused by corgifs itself, in the feedback tree too.
func TestAFeedbackMountChangesNothingButFeedbackFiles(t *testing.T) {
	src := genSynthetic(t, 500, 8, 2, 1, "clustered")
	m := feedbackMount(t, src, smallFlags...)
	checkEveryMutationGivesEROFS(t, m)
	fb := filepath.Join(m.dir, ".corgifs", "feedback")
	ep := filepath.Join(fb, "epoch-0000")
	status := filepath.Join(fb, "status.json")
	checks := map[string]error{
		"write status.json":        os.WriteFile(status, []byte("{}"), 0o644),
		"unlink status.json":       os.Remove(status),
		"rename status.json":       os.Rename(status, filepath.Join(fb, "x")),
		"mkdir in feedback":        os.Mkdir(filepath.Join(fb, "epoch-0001x"), 0o755),
		"mkdir in an epoch":        os.Mkdir(filepath.Join(ep, "d"), 0o755),
		"symlink in an epoch":      os.Symlink(status, filepath.Join(ep, "part-00000-of-00001.f32")),
		"rmdir an epoch":           syscall.Rmdir(ep),
		"chmod the feedback dir":   os.Chmod(fb, 0o777),
		"create in .corgifs":       os.WriteFile(filepath.Join(m.dir, ".corgifs", "x.f32"), nil, 0o644),
		"create in an epoch of K1": os.WriteFile(filepath.Join(m.dir, "epoch-0000", "part-00000-of-00001.f32"), nil, 0o644),
	}
	for op, err := range checks {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: got %v, want EROFS", op, err)
		}
	}
}

// TestBadFeedbackIsRefusedThroughTheMount writes each kind of bad feedback
// file through a real mount: each is refused with an errno, a reason in
// status.json and a log line, and a good file written after them is
// accepted.
func TestBadFeedbackIsRefusedThroughTheMount(t *testing.T) {
	const n = 500
	src := genSynthetic(t, n, 8, 2, 1, "clustered")
	m := feedbackMount(t, src, append(smallFlags, "--feedback-dim", "4")...)
	dir := filepath.Join(m.dir, ".corgifs", "feedback", "epoch-0000")
	part := filepath.Join(dir, "part-00000-of-00001.f32")
	write := func(name string, flag int, b []byte) (werr, cerr error) {
		f, err := os.OpenFile(name, flag, 0o644)
		if err != nil {
			return err, nil
		}
		// Odd chunks: the file is taken in any pieces.
		for len(b) > 0 && werr == nil {
			k := min(len(b), 1000)
			_, werr = f.Write(b[:k])
			b = b[k:]
		}
		return werr, f.Close()
	}
	wb := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	cases := []struct {
		name    string
		path    string
		flag    int
		b       []byte
		errno   syscall.Errno
		because string
	}{
		{"wrong magic", part, wb, feedbackFile("CGFX", 1, 3, n), syscall.EBADMSG, "wrong magic"},
		{"wrong version", part, wb, feedbackFile("CGFB", 2, 3, n), syscall.EBADMSG, "wrong version 2"},
		{"too few vectors", part, wb, feedbackFile("CGFB", 1, 3, n-1), syscall.EBADMSG, "too few vectors: 499 of dimension 3 for the 500 records"},
		{"too many vectors", part, wb, feedbackFile("CGFB", 1, 3, n+1), syscall.EBADMSG, "too many vectors: 501"},
		{"larger than the budget", part, wb, feedbackFile("CGFB", 1, 5, n), syscall.EFBIG, "more bytes than the budget allows"},
		{"unknown part", filepath.Join(dir, "part-00001-of-00001.f32"), wb, nil, syscall.EINVAL, "unknown part"},
		{"not a part", filepath.Join(dir, "gradients.bin"), wb, nil, syscall.EINVAL, "unknown part"},
		{"outside an epoch", filepath.Join(filepath.Dir(dir), "part-00000-of-00001.f32"), wb, nil, syscall.EINVAL, "not a feedback file"},
		{"appended", part, os.O_WRONLY | os.O_CREATE | os.O_APPEND, nil, syscall.EINVAL, "O_APPEND"},
		{"unknown epoch", filepath.Join(m.dir, ".corgifs", "feedback", "epoch-x", "part-00000-of-00001.f32"), wb, nil, syscall.ENOENT, "unknown epoch"},
	}
	for _, c := range cases {
		werr, cerr := write(c.path, c.flag, c.b)
		if err := errors.Join(werr, cerr); !errors.Is(err, c.errno) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.errno)
			continue
		}
		if c.because == "" {
			continue
		}
		st := readFeedbackStatus(t, m)
		if len(st.Refusals) == 0 || !strings.Contains(st.Refusals[len(st.Refusals)-1].Reason, c.because) {
			t.Errorf("%s: status.json refusals do not end with %q: %+v", c.name, c.because, st.Refusals)
		}
		if !logSays(m, c.because) {
			t.Errorf("%s: no log line says %q", c.name, c.because)
		}
	}
	if st := readFeedbackStatus(t, m); st.Accepted != 0 || st.Dim != 0 {
		t.Fatalf("a refused file was accepted: %+v", st)
	}

	// A good file, then a write after its close through another
	// descriptor, then a second upload of the accepted part.
	f, err := os.OpenFile(part, wb, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	good := feedbackFile("CGFB", 1, 3, n)
	if _, err := f.Write(good); err != nil {
		t.Fatal(err)
	}
	dup, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close of a good file: %v\n%s", err, m.log)
	}
	if _, err := syscall.Pwrite(dup, good[:4], 0); !errors.Is(err, syscall.EBADF) {
		t.Errorf("write after close: got %v, want EBADF", err)
	}
	syscall.Close(dup)
	if werr, cerr := write(part, wb, good); !errors.Is(errors.Join(werr, cerr), syscall.EEXIST) {
		t.Errorf("second upload of an accepted part: got %v, %v, want EEXIST", werr, cerr)
	}
	st := readFeedbackStatus(t, m)
	if st.Accepted != 1 || st.Dim != 3 || len(st.Parts) != 1 || st.Parts[0].State != "accepted" || st.Parts[0].Records != n {
		t.Fatalf("status after the good file: %+v", st)
	}
	for _, want := range []string{"after the file was closed", "accepted already"} {
		if !logSays(m, want) {
			t.Errorf("no log line says %q", want)
		}
	}
	// Nothing else was affected.
	if len(frames(t, m.read(0, 0, 1))) != n {
		t.Fatal("the part changed")
	}
}

// TestFeedbackForAnEpochNotYetServedIsRefusedAtOnceWithoutFixingItsOrder
// writes feedback for epoch 5 when only epoch 0 was read: its order
// depends on epoch 4's feedback, so the file cannot be for records a
// trainer read. It is refused at the open, without waiting for
// --feedback-timeout, with a status entry and a log line, and without a
// fallback that would lock epoch 5 to a random order.
func TestFeedbackForAnEpochNotYetServedIsRefusedAtOnceWithoutFixingItsOrder(t *testing.T) {
	const n = 500
	src := genSynthetic(t, n, 8, 2, 1, "clustered")
	m := feedbackMount(t, src, append(smallFlags, "--feedback-dim", "4", "--feedback-timeout", "3s")...)
	m.read(0, 0, 1)
	dir := filepath.Join(m.dir, ".corgifs", "feedback", "epoch-0005")
	err := os.WriteFile(filepath.Join(dir, "part-00000-of-00001.f32"), feedbackFile("CGFB", 1, 3, n), 0o644)
	if !errors.Is(err, syscall.EINVAL) {
		t.Errorf("feedback for epoch 5: got %v, want EINVAL", err)
	}
	const because = "epoch 5 has not been served yet: its order depends on epoch 4's feedback"
	st := readFeedbackStatus(t, m)
	if len(st.Refusals) == 0 || !strings.Contains(st.Refusals[len(st.Refusals)-1].Reason, because) || st.Refusals[len(st.Refusals)-1].Epoch != 5 {
		t.Errorf("status.json refusals do not end with epoch 5 %q: %+v", because, st.Refusals)
	}
	if st.Accepted != 0 || len(st.Parts) != 0 && st.Parts[0].State == "accepted" {
		t.Errorf("the feedback of an epoch not served was accepted: %+v", st)
	}
	if !logSays(m, because) {
		t.Errorf("no log line says %q\n%s", because, m.log)
	}
	b, err := os.ReadFile(api.StatsPath(m.dir))
	if err != nil {
		t.Fatal(err)
	}
	var stats api.Stats
	if err := json.Unmarshal(b, &stats); err != nil || stats.Feedback == nil {
		t.Fatalf("stats.json has no feedback counters (%v): %s", err, b)
	}
	if stats.Feedback.Fallbacks != 0 || strings.Contains(m.log.String(), "waiting for the previous epoch's feedback") {
		t.Errorf("epoch 5 was planned (%d fallbacks): its order is now fixed\n%s", stats.Feedback.Fallbacks, m.log)
	}
	// Epoch 0's feedback is still taken.
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "epoch-0000", "part-00000-of-00001.f32"), feedbackFile("CGFB", 1, 3, n), 0o644); err != nil {
		t.Errorf("feedback for epoch 0 after the refusal: %v\n%s", err, m.log)
	}
}

// TestFeedbackThatCannotFitInMaxMemoryIsRefusedAtMount checks that the
// mount refuses a --feedback-dim whose vectors do not fit, naming the
// numbers.
func TestFeedbackThatCannotFitInMaxMemoryIsRefusedAtMount(t *testing.T) {
	fuseOK(t)
	src := genSynthetic(t, 1000, 8, 2, 1, "clustered")
	cmd := []string{"mount", src, t.TempDir(), "--cache-dir", t.TempDir(), "--max-memory", "2MiB", "--feedback-dim", "1000", "--strategy", "grab"}
	// Should the mount succeed, it serves until the context ends it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, cmd...)
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		childmount.Detach(cmd[2])
	}
	if err == nil || !strings.Contains(string(out), "1000 records × (4 × 1000 + 12) bytes = 3.8 MiB") {
		t.Fatalf("mount: %v\n%s", err, out)
	}
}

// TestLogRegFeedbackExampleTrainsThroughAFeedbackMount runs
// examples/pytorch/logreg_feedback.py on a feedback mount: every epoch
// serves each record once, the feedback of every epoch is accepted (none
// falls back to a random reshuffle), and the full training loss falls.
func TestLogRegFeedbackExampleTrainsThroughAFeedbackMount(t *testing.T) {
	t.Parallel() // see "Parallel tests" in harness_test.go
	torchOK(t)
	const records, epochs = 2000, 3
	src := genSynthetic(t, records, 18, 2, 2, "clustered")
	m := feedbackMount(t, src, append(smallFlags, "--feedback-dim", "19")...)
	out := filepath.Join(t.TempDir(), "report.json")
	stdout := runPython(t, "../examples/pytorch/logreg_feedback.py", "--mount", m.dir, "--epochs", strconv.Itoa(epochs), "--report", out)
	t.Logf("logreg_feedback.py:\n%s", stdout)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Epochs []struct {
			Records   int
			TrainLoss float64 `json:"train_loss"`
			IDs       []int64 `json:"ids"`
		}
		Feedback struct{ Accepted, Refused, Fallbacks int }
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Epochs) != epochs {
		t.Fatalf("%d epochs in the report, want %d", len(r.Epochs), epochs)
	}
	for e, ep := range r.Epochs {
		seen := map[int64]bool{}
		for _, id := range ep.IDs {
			seen[id] = true
		}
		if ep.Records != records || len(seen) != records {
			t.Errorf("epoch %d: %d records, %d distinct, want %d", e, ep.Records, len(seen), records)
		}
	}
	if r.Feedback.Accepted != epochs || r.Feedback.Refused != 0 || r.Feedback.Fallbacks != 0 {
		t.Errorf("feedback: %+v, want %d accepted and nothing else", r.Feedback, epochs)
	}
	if first, last := r.Epochs[0].TrainLoss, r.Epochs[epochs-1].TrainLoss; !(last < first) {
		t.Errorf("full training loss %v after epoch 0, %v after epoch %d: did not fall", first, last, epochs-1)
	}
}

// TestOnlyFeedbackStrategiesTakeFeedbackFiles: a mount of another
// strategy has no feedback directory and stays read-only for the kernel.
func TestOnlyFeedbackStrategiesTakeFeedbackFiles(t *testing.T) {
	src := genSynthetic(t, 500, 8, 2, 1, "clustered")
	m := startMount(t, src, smallFlags...)
	fb := filepath.Join(m.dir, ".corgifs", "feedback")
	if _, err := os.Stat(fb); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s: got %v, want ENOENT", fb, err)
	}
	if err := os.WriteFile(filepath.Join(fb, "epoch-0000", "part-00000-of-00001.f32"), feedbackFile("CGFB", 1, 2, 500), 0o644); err == nil {
		t.Error("a feedback file was written to a corgipile mount")
	}
	if err := os.WriteFile(filepath.Join(m.dir, ".corgifs", "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create in .corgifs: got %v, want EROFS", err)
	}
}
