package feedback

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// file returns a feedback file of the given header fields and vectors.
func file(magic string, version, dim, reserved uint32, vecs [][]float32) []byte {
	b := []byte(magic)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint32(b, dim)
	b = binary.LittleEndian.AppendUint32(b, reserved)
	for _, v := range vecs {
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	}
	return b
}

func vectors(n, dim int, seed float32) [][]float32 {
	v := make([][]float32, n)
	for i := range v {
		v[i] = make([]float32, dim)
		for j := range v[i] {
			v[i][j] = seed + float32(i) + float32(j)/10
		}
	}
	return v
}

// logBuf collects the store's log lines.
type logBuf struct{ bytes.Buffer }

func newStore(t *testing.T, o Options) (*Store, *logBuf) {
	t.Helper()
	var lb logBuf
	if o.Dir == "" {
		o.Dir = filepath.Join(t.TempDir(), "fb")
	}
	if o.Records == 0 {
		o.Records = 10
	}
	if o.Dim == 0 && o.MaxBytes == 0 {
		o.Dim = 8
	}
	o.Logger = slog.New(slog.NewTextHandler(&lb.Buffer, nil))
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &lb
}

// upload writes b in the given chunks and closes.
func upload(t *testing.T, s *Store, epoch, part, parts int, served []int32, b []byte, chunk int, shuffle bool) error {
	t.Helper()
	u, err := s.Begin(epoch, part, parts, served)
	if err != nil {
		return err
	}
	var offs []int
	for off := 0; off < len(b); off += chunk {
		offs = append(offs, off)
	}
	if shuffle {
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
	}
	for _, off := range offs {
		if _, err := u.WriteAt(b[off:min(len(b), off+chunk)], int64(off)); err != nil {
			u.Close()
			return err
		}
	}
	return u.Close()
}

func TestWellFormedFeedbackInAnyChunksAndOrderIsAccepted(t *testing.T) {
	s, _ := newStore(t, Options{Records: 10, Dim: 8})
	served := []int32{3, 1, 4, 0, 5, 9, 2, 6, 8, 7}
	v := vectors(10, 3, 1)
	if err := upload(t, s, 0, 0, 1, served, file(Magic, 1, 3, 0, v), 7, true); err != nil {
		t.Fatal(err)
	}
	ids, vecs, dim, ok := s.Epoch(0, 0, 1)
	if !ok || dim != 3 || len(ids) != 10 || len(vecs) != 30 {
		t.Fatalf("Epoch: ok %v dim %d ids %d vecs %d", ok, dim, len(ids), len(vecs))
	}
	for i, id := range ids {
		if id != served[i] {
			t.Fatalf("ids[%d] = %d, want %d", i, id, served[i])
		}
		for j := range 3 {
			if vecs[i*3+j] != v[i][j] {
				t.Fatalf("vecs of record %d differ", i)
			}
		}
		if got := s.Latest(id); len(got) != 3 || got[2] != v[i][2] {
			t.Fatalf("Latest(%d) = %v, want %v", id, got, v[i])
		}
	}
	if !s.WaitEpoch(context.Background(), 0, 1, 0) || !s.Complete(0, 1) {
		t.Fatal("epoch 0 not complete")
	}
	st := s.Status()
	if len(st.Parts) != 1 || st.Parts[0].State != stateAccepted || st.Accepted != 1 || st.Dim != 3 {
		t.Fatalf("status: %+v", st)
	}
}

func TestBadFeedbackIsRefusedWithAReasonAndChangesNothing(t *testing.T) {
	served := []int32{0, 1, 2, 3}
	good := file(Magic, 1, 2, 0, vectors(4, 2, 5))
	holed := bytes.Clone(good)
	cases := []struct {
		name, want string
		b          []byte
		write      func(u *Upload) error
	}{
		{"wrong magic", "wrong magic", file("CGFX", 1, 2, 0, vectors(4, 2, 0)), nil},
		{"wrong version", "wrong version 2", file(Magic, 2, 2, 0, vectors(4, 2, 0)), nil},
		{"reserved", "reserved header field", file(Magic, 1, 2, 7, vectors(4, 2, 0)), nil},
		{"wrong dimension", "wrong dimension 3", file(Magic, 1, 3, 0, vectors(4, 3, 0)), nil},
		{"too few", "too few vectors: 3", file(Magic, 1, 2, 0, vectors(3, 2, 0)), nil},
		{"too many", "too many vectors: 5", file(Magic, 1, 2, 0, vectors(5, 2, 0)), nil},
		{"partial vector", "not a whole number", file(Magic, 1, 2, 0, vectors(4, 2, 0))[:HeaderSize+30], nil},
		{"no header", "no header", []byte("CGF"), nil},
		{"empty", "no header", nil, nil},
		{"not finite", "must be finite", file(Magic, 1, 2, 0, [][]float32{{1, 2}, {3, float32(math.NaN())}, {1, 1}, {2, 2}}), nil},
		{"hole", "never written", nil, func(u *Upload) error {
			if _, err := u.WriteAt(holed[:20], 0); err != nil {
				return err
			}
			_, err := u.WriteAt(holed[28:], 28)
			return err
		}},
		{"too large", "more bytes than the budget allows", nil, func(u *Upload) error {
			// Dimension 8 is the budget's largest: 16 + 4 × 8 × 4 bytes.
			_, err := u.WriteAt(make([]byte, 4), HeaderSize+4*8*4)
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("write past the budget: %v, want ErrTooLarge", err)
			}
			return nil
		}},
		{"dimension past the budget", "more bytes than the budget allows: dimension 9", file(Magic, 1, 9, 0, nil), nil},
	}
	s, lb := newStore(t, Options{Records: 10, Dim: 8})
	if err := upload(t, s, 0, 0, 2, served, good, 1<<10, false); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lb.Reset()
			part := 1 + i
			u, err := s.Begin(0, part, 100, served)
			if err != nil {
				t.Fatal(err)
			}
			if c.write != nil {
				if err := c.write(u); err != nil {
					t.Fatal(err)
				}
			} else if len(c.b) > 0 {
				if _, err := u.WriteAt(c.b, 0); err != nil {
					t.Fatal(err)
				}
			}
			err = u.Close()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Close: %v, want an error saying %q", err, c.want)
			}
			if !strings.Contains(lb.String(), "feedback refused") {
				t.Errorf("no log line: %q", lb.String())
			}
			st := s.Status()
			var found bool
			for _, p := range st.Parts {
				if p.Epoch == 0 && p.Part == part && p.Parts == 100 {
					found = p.State == stateRefused && strings.Contains(p.Reason, c.want)
				}
			}
			if !found {
				t.Errorf("status does not show the refusal: %+v", st.Parts)
			}
			if _, _, _, ok := s.Epoch(0, part, 100); ok {
				t.Error("Epoch returns a refused upload")
			}
		})
	}
	// Nothing else was affected: the accepted part and the latest vectors.
	if _, vecs, dim, ok := s.Epoch(0, 0, 2); !ok || dim != 2 || vecs[7] != 5+3+0.1 {
		t.Fatalf("accepted part changed: ok %v dim %d", ok, dim)
	}
	if got := s.Latest(3); got[1] != float32(5+3)+0.1 {
		t.Fatalf("Latest(3) = %v", got)
	}
	if got := s.Latest(4); got != nil {
		t.Fatalf("Latest of a record never accepted = %v", got)
	}
	ents, _ := os.ReadDir(s.dir.Path())
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("staged file %s left behind", e.Name())
		}
	}
}

func TestFeedbackForAnUnknownPartIsRefused(t *testing.T) {
	s, lb := newStore(t, Options{})
	for _, k := range [][3]int{{-1, 0, 1}, {0, 1, 1}, {0, -1, 2}, {0, 0, 0}} {
		if _, err := s.Begin(k[0], k[1], k[2], nil); err == nil || !strings.Contains(err.Error(), "unknown epoch or part") {
			t.Errorf("Begin%v: %v", k, err)
		}
	}
	if _, err := s.Begin(0, 0, 1, []int32{10}); err == nil || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("Begin with a record past the dataset: %v", err)
	}
	if err := s.Refuse(-1, -1, -1, "epoch-x/part.f32", "not a feedback file name"); err == nil {
		t.Error("Refuse returned nil")
	}
	if st := s.Status(); len(st.Refusals) != 6 || st.Refused != 6 || !strings.Contains(lb.String(), "not a feedback file name") {
		t.Errorf("refusals: %+v\n%s", st.Refusals, lb.String())
	}
}

func TestWriteAfterCloseIsRefusedAndTheUploadStands(t *testing.T) {
	s, lb := newStore(t, Options{})
	u, err := s.Begin(0, 0, 1, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	b := file(Magic, 1, 2, 0, vectors(1, 2, 1))
	u.WriteAt(b, 0)
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := u.WriteAt(b, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v, want ErrClosed", err)
	}
	if !strings.Contains(lb.String(), "after the file was closed") {
		t.Errorf("no log line: %s", lb.String())
	}
	if err := u.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, _, ok := s.Epoch(0, 0, 1); !ok {
		t.Fatal("the accepted upload was lost")
	}
}

func TestAcceptedFeedbackIsFinalAndOneWriterAtATime(t *testing.T) {
	s, _ := newStore(t, Options{})
	u, err := s.Begin(0, 0, 1, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(0, 0, 1, []int32{0}); err == nil || !strings.Contains(err.Error(), "another open file") {
		t.Fatalf("second writer: %v", err)
	}
	u.WriteAt(file(Magic, 1, 2, 0, vectors(1, 2, 1)), 0)
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(0, 0, 1, []int32{0}); err == nil || !strings.Contains(err.Error(), "accepted already") {
		t.Fatalf("rewrite of an accepted part: %v", err)
	}
	// A refused part may be written again.
	u, _ = s.Begin(1, 0, 1, []int32{0})
	u.Close()
	if err := upload(t, s, 1, 0, 1, []int32{0}, file(Magic, 1, 2, 0, vectors(1, 2, 9)), 4, false); err != nil {
		t.Fatalf("second try after a refusal: %v", err)
	}
	if got := s.Latest(0); got[0] != 9 {
		t.Fatalf("Latest after epoch 1 = %v", got)
	}
}

func TestFeedbackThatCannotFitInMemoryIsRefusedAtOpen(t *testing.T) {
	_, err := Open(Options{Dir: t.TempDir(), Records: 1000, Dim: 64, MaxBytes: 100_000})
	if err == nil || !strings.Contains(err.Error(), "1000 records") || !strings.Contains(err.Error(), "268000") {
		t.Fatalf("Open: %v", err)
	}
	_, err = Open(Options{Dir: t.TempDir(), Records: 1000, MaxBytes: 15_000})
	if err == nil || !strings.Contains(err.Error(), "one dimension") {
		t.Fatalf("Open: %v", err)
	}
	s, err := Open(Options{Dir: t.TempDir(), Records: 1000, MaxBytes: Bound(1000, 5)})
	if err != nil || s.MaxDim() != 5 {
		t.Fatalf("Open: %v, max dim %d", err, s.MaxDim())
	}
	s.Close()
}

func TestWaitEpochEndsAtTheTimeoutOrWhenAllPartsArrive(t *testing.T) {
	s, _ := newStore(t, Options{})
	if s.WaitEpoch(context.Background(), 0, 2, 10*time.Millisecond) {
		t.Fatal("WaitEpoch true without feedback")
	}
	done := make(chan bool)
	go func() { done <- s.WaitEpoch(context.Background(), 0, 2, time.Hour) }()
	for i := range 2 {
		if err := upload(t, s, 0, i, 2, []int32{int32(i)}, file(Magic, 1, 1, 0, vectors(1, 1, 0)), 64, false); err != nil {
			t.Fatal(err)
		}
	}
	if !<-done {
		t.Fatal("WaitEpoch false after all parts arrived")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.WaitEpoch(ctx, 1, 1, time.Hour) {
		t.Fatal("WaitEpoch true with a done context")
	}
	s.CountFallback()
	if s.Stats().Fallbacks != 1 {
		t.Fatal("fallback not counted")
	}
}

func TestOnlyTheNewestEpochsAreKept(t *testing.T) {
	s, _ := newStore(t, Options{})
	for e := range 4 {
		if err := upload(t, s, e, 0, 1, []int32{0, 1}, file(Magic, 1, 1, 0, vectors(2, 1, float32(e))), 64, false); err != nil {
			t.Fatal(err)
		}
	}
	for e, want := range []bool{false, false, true, true} {
		if _, _, _, ok := s.Epoch(e, 0, 1); ok != want {
			t.Errorf("epoch %d kept: %v, want %v", e, ok, want)
		}
	}
	// Each kept upload, and the served ids saved beside it.
	ents, _ := os.ReadDir(s.dir.Path())
	if len(ents) != 4 {
		t.Errorf("files in the store: %d, want 4", len(ents))
	}
}

func TestSavedOrdersSurviveReopenAndDamagedOnesAreIgnored(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fb")
	s, _ := newStore(t, Options{Dir: dir})
	want := []int32{3, 1, 2, 0, 9}
	if err := s.SaveOrder("epoch-0001-part-0-of-1", want); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveOrder("../x", want); err == nil {
		t.Fatal("SaveOrder accepted a path")
	}
	s.Close()
	s, lb := newStore(t, Options{Dir: dir})
	got, ok := s.LoadOrder("epoch-0001-part-0-of-1")
	if !ok || !slicesEqual(got, want) {
		t.Fatalf("LoadOrder = %v, %v", got, ok)
	}
	if _, ok := s.LoadOrder("missing"); ok {
		t.Fatal("LoadOrder of a missing order")
	}
	p := filepath.Join(s.dir.Path(), "order-epoch-0001-part-0-of-1")
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 1
	os.WriteFile(p, b, 0o600)
	if _, ok := s.LoadOrder("epoch-0001-part-0-of-1"); ok || !strings.Contains(lb.String(), "checksum") {
		t.Fatalf("damaged order loaded (log %s)", lb.String())
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEpochsOnlyKeepsNoVectorInMemory(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), Records: 10, Dim: 4, EpochsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := upload(t, s, 0, 0, 1, []int32{2, 0, 1}, file(Magic, 1, 4, 0, vectors(3, 4, 1)), 16, false); err != nil {
		t.Fatal(err)
	}
	if v := s.Latest(2); v != nil {
		t.Fatalf("Latest = %v with EpochsOnly", v)
	}
	if _, vecs, dim, ok := s.Epoch(0, 0, 1); !ok || dim != 4 || vecs[4] != 2 {
		t.Fatalf("Epoch: ok %v dim %d vecs %v", ok, dim, vecs)
	}
	if st := s.Stats(); st.BytesHeld != 3*4 || st.Dim != 4 {
		t.Fatalf("stats %+v: only the served ids should be held", st)
	}
}

func TestRefusalsForEverNewPartsDoNotGrowTheStore(t *testing.T) {
	s, _ := newStore(t, Options{})
	for e := range 3 * maxRefusals {
		u, err := s.Begin(e, 0, 1, []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Close(); err == nil {
			t.Fatal("an empty file was accepted")
		}
	}
	if st := s.Status(); len(st.Parts) != maxRefusals || len(st.Refusals) != maxRefusals || st.Refused != 3*maxRefusals {
		t.Fatalf("%d parts and %d refusals kept, %d counted", len(st.Parts), len(st.Refusals), st.Refused)
	}
}
