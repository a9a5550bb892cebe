package fs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/api"
	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
	"github.com/corgifs/corgifs/internal/testenv"
	"github.com/corgifs/corgifs/shuffler"
)

// TestFeedbackIsKeptForTheRecordsInTheOrderTheyWereServed mounts a dataset
// whose lines name their record ids, reads a part, writes a vector per
// record it read (the record's id and its place), and checks that the
// store has every vector under the record it was written for.
func TestFeedbackIsKeptForTheRecordsInTheOrderTheyWereServed(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "no /dev/fuse")
	}
	const records = 2000
	src := t.TempDir()
	var lines bytes.Buffer
	for i := range records {
		fmt.Fprintf(&lines, "{\"id\": %d}\n", i)
	}
	if err := os.WriteFile(filepath.Join(src, "data.jsonl"), lines.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ix, err := index.Build(ctx, blocktest.Dir(t, src, false), index.Options{BlockSize: 1 << 10, Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := shuffler.NewPlanner(ix, shuffler.Params{Strategy: "corgipile", Seed: 5, Buffer: shuffler.BufferSize{Percent: 10}, MaxMemory: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := feedback.Open(feedback.Options{Dir: filepath.Join(t.TempDir(), "fb"), Records: ix.Records, Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	mnt := t.TempDir()
	srv, err := Mount(ctx, Config{Mountpoint: mnt, Planner: pl, Loader: blockcache.NewLoader(ix, blockcache.LoaderOptions{MaxMemory: 8 << 20, Buffered: true}),
		Epochs: 1, Parts: 2, Info: api.Config{}, Feedback: fb})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Unmount()

	for part := range 2 {
		f, err := os.Open(shuffler.PartPath(mnt, 0, part, 2, ".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var served []int32
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			id, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(sc.Text(), "{\"id\": "), "}"))
			if err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			served = append(served, int32(id))
		}
		f.Close()
		b := []byte(feedback.Magic)
		for _, x := range []uint32{1, 2, 0} {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		for i, id := range served {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(id)))
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(i)))
		}
		name := filepath.Join(mnt, ".corgifs", "feedback", "epoch-0000", fmt.Sprintf("part-%05d-of-00002.f32", part))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		ids, vecs, dim, ok := fb.Epoch(0, part, 2)
		if !ok || dim != 2 || len(ids) != len(served) {
			t.Fatalf("part %d: Epoch: ok %v, dim %d, %d ids for %d served records", part, ok, dim, len(ids), len(served))
		}
		for i, id := range ids {
			if id != served[i] || vecs[2*i] != float32(id) || vecs[2*i+1] != float32(i) {
				t.Fatalf("part %d record %d: id %d (served %d), vector %v", part, i, id, served[i], vecs[2*i:2*i+2])
			}
			if v := fb.Latest(id); len(v) != 2 || v[0] != float32(id) {
				t.Fatalf("Latest(%d) = %v", id, v)
			}
		}
	}
	if !fb.Complete(0, 2) {
		t.Fatal("epoch 0 not complete after both parts")
	}
	st, err := os.ReadFile(filepath.Join(mnt, ".corgifs", "feedback", "status.json"))
	if err != nil || !bytes.Contains(st, []byte(`"accepted": 2`)) {
		t.Fatalf("status.json: %v\n%s", err, st)
	}
	stats, err := os.ReadFile(filepath.Join(mnt, ".corgifs", "stats.json"))
	if err != nil || !bytes.Contains(stats, []byte(`"feedback": {`)) {
		t.Fatalf("stats.json: %v\n%s", err, stats)
	}
}
