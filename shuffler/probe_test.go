package shuffler

import (
	"bytes"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/internal/blocktest"
)

// A probed index and a full index of the same files serve byte-identical
// parts for every block strategy, K and epoch: the permutation of a buffer
// of counts unknown at planning is computed from the count loaded, which
// is the full index's count. Sizes are exact before any read.
func TestProbedAndFullIndexesServeTheSameBytes(t *testing.T) {
	dirs := formatSources(t)
	dirs["tfrecord"] = strings.TrimSuffix(newStreamFixture(t).paths[0], "/part-0.tfrecord")
	for name, dir := range dirs {
		full, err := index.Build(t.Context(), blocktest.Dir(t, dir, false), index.Options{BlockSize: 2048})
		if err != nil {
			t.Fatal(err)
		}
		probed, err := index.Build(t.Context(), blocktest.Dir(t, dir, false), index.Options{BlockSize: 2048, Probe: true})
		if err != nil {
			t.Fatal(err)
		}
		if !probed.Probed || (name == "tfrecord" || name == "wds" || name == "csv") != probed.CountsUnknown {
			t.Fatalf("%s: Probed %v, CountsUnknown %v", name, probed.Probed, probed.CountsUnknown)
		}
		for _, strategy := range []string{"corgipile", "block", "none", "local", "pls"} {
			p := Params{Strategy: strategy, Seed: 9, Buffer: BufferSize{Percent: 30}, MaxMemory: 8 << 20}
			if strategy == "pls" {
				p.Exchange = 0.3
			}
			plf, err := NewPlanner(full, p)
			if err != nil {
				t.Fatal(err)
			}
			plp, err := NewPlanner(probed, p)
			if err != nil {
				t.Fatal(err)
			}
			lf := blockcache.NewLoader(full, blockcache.LoaderOptions{MaxMemory: 8 << 20})
			lp := blockcache.NewLoader(probed, blockcache.LoaderOptions{MaxMemory: 8 << 20})
			for _, parts := range []int{1, 3} {
				for epoch := range 2 {
					for part := range parts {
						sf, err := OpenStream(plf, lf, epoch, part, parts)
						if err != nil {
							t.Fatal(err)
						}
						sp, err := OpenStream(plp, lp, epoch, part, parts)
						if err != nil {
							t.Fatal(err)
						}
						if sf.Size() != sp.Size() {
							t.Fatalf("%s %s epoch %d part %d of %d: %d bytes probed, %d full", name, strategy, epoch, part, parts, sp.Size(), sf.Size())
						}
						a, b := readAll(t, sf, 7000, 0, sf.Size()), readAll(t, sp, 7000, 0, sp.Size())
						if !bytes.Equal(a, b) {
							t.Fatalf("%s %s epoch %d part %d of %d: probed and full differ at byte %d", name, strategy, epoch, part, parts, firstDiff(a, b))
						}
						sf.Close()
						sp.Close()
					}
				}
			}
		}
	}
}

// Strategies that read single records, and --equal-parts, are refused
// on a probed index, with a message that names --index full.
func TestProbedIndexRefusesRecordStrategiesAndEqualParts(t *testing.T) {
	f := newStreamFixture(t)
	dir := strings.TrimSuffix(f.paths[0], "/part-0.tfrecord")
	probed, err := index.Build(t.Context(), blocktest.Dir(t, dir, false), index.Options{BlockSize: streamBlockSize, Probe: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Params{{Strategy: "full"}, {Strategy: "window"}, {Strategy: "once"}, {Strategy: "mrs"}, {Strategy: "grab"}, {Strategy: "cdgrab"}, {Strategy: "corgipile-balance"}, {Strategy: "corgipile", EqualParts: true}} {
		p.Seed, p.Buffer, p.MaxMemory = 1, BufferSize{Percent: 10}, streamMemory
		if _, err := NewPlanner(probed, p); err == nil || !strings.Contains(err.Error(), "{index} full") {
			t.Fatalf("%+v on a probed index: %v, want an error naming {index} full", p, err)
		}
	}
	pl, err := NewPlanner(probed, Params{Strategy: "corgipile", Seed: 1, Buffer: BufferSize{Percent: 10}, MaxMemory: streamMemory})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pl.Plan(0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Records != -1 || plan.Buffers[0].Count != -1 {
		t.Fatalf("plan of a probed index: %d records, first buffer %d; want -1 (unknown)", plan.Records, plan.Buffers[0].Count)
	}
	if err := pl.Walk(t.Context(), plan, func(RecordRef) error { return nil }); err == nil || !strings.Contains(err.Error(), "{index} full") {
		t.Fatalf("Walk of a probed plan: %v, want an error naming {index} full", err)
	}
}
