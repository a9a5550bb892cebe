package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/api"
)

// TestLocalAndPLSMountsServeEveryRecordOncePerEpochAsOrderSays mounts local
// and pls and reads the 3 parts of 3 epochs: together they hold every
// source record once per epoch, each part is the records `corgifs order`
// prints for it, local's parts keep their records from epoch to epoch in a
// new order, and config.json says the partition and Q.
func TestLocalAndPLSMountsServeEveryRecordOncePerEpochAsOrderSays(t *testing.T) {
	src := genSynthetic(t, 6000, 8, 4, 4, "clustered")
	want := sortedHashes(sourceRecords(t, src))
	cache := t.TempDir()
	const k = 3
	for _, c := range []struct {
		name  string
		flags []string
		q     float64
	}{
		{"local-random", []string{"--strategy", "local"}, 0},
		{"local-contiguous", []string{"--strategy", "local", "--partition", "contiguous"}, 0},
		{"pls-0.3", []string{"--strategy", "pls", "--exchange", "0.3"}, 0.3},
		{"pls-1-contiguous", []string{"--strategy", "pls", "--exchange", "1", "--partition", "contiguous"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			flags := append([]string{"--block-size", "16KiB", "--buffer", "10%", "--seed", "5"}, c.flags...)
			m := startMount(t, src, flags...)
			var cfg api.Config
			b, err := os.ReadFile(api.ConfigPath(m.dir))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			wantPart := "random"
			if slices.Contains(c.flags, "contiguous") {
				wantPart = "contiguous"
			}
			if cfg.Partition != wantPart || cfg.Exchange == nil || *cfg.Exchange != c.q {
				t.Fatalf("config.json: partition %q, exchange %v; want %q, %g", cfg.Partition, cfg.Exchange, wantPart, c.q)
			}
			var prev [][][32]byte
			for e := range 3 {
				var all [][32]byte
				var parts [][][32]byte
				for i := range k {
					served := frames(t, m.read(e, i, k))
					out := corgifs(t, append([]string{"order", src, "--epoch", fmt.Sprint(e), "--part", fmt.Sprint(i), "--parts", fmt.Sprint(k), "--cache-dir", cache}, flags...)...)
					order := orderFrames(t, src, out)
					if len(order) != len(served) {
						t.Fatalf("epoch %d part %d: order printed %d records, the mount served %d", e, i, len(order), len(served))
					}
					for j, o := range order {
						if !bytes.Equal(o.payload(), served[j]) {
							t.Fatalf("epoch %d part %d record %d: order says %s, not the record served", e, i, j, o.line)
						}
					}
					h := hashes(served)
					all = append(all, h...)
					parts = append(parts, h)
				}
				if !slices.Equal(sortedHashes(all), want) {
					t.Fatalf("epoch %d: %d records served, want each of the %d source records once", e, len(all), len(want))
				}
				if c.q == 0 && prev != nil {
					for i := range k {
						if !slices.Equal(sortedHashes(parts[i]), sortedHashes(prev[i])) {
							t.Fatalf("epoch %d part %d: local changed the part's records", e, i)
						}
						if slices.Equal(parts[i], prev[i]) {
							t.Fatalf("epoch %d part %d: the same order as the epoch before", e, i)
						}
					}
				}
				if c.q > 0 && prev != nil && slices.EqualFunc(parts, prev, func(a, b [][32]byte) bool {
					return slices.Equal(sortedHashes(a), sortedHashes(b))
				}) {
					t.Fatalf("epoch %d: pls with Q=%g exchanged nothing", e, c.q)
				}
				prev = parts
			}
		})
	}
}

// TestExchangeFlagsGiveClearErrors: --exchange outside [0, 1], an unknown
// --partition, and either flag with a strategy it does not apply to are
// refused, saying what to do.
func TestExchangeFlagsGiveClearErrors(t *testing.T) {
	src := genSynthetic(t, 100, 4, 2, 1, "clustered")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--strategy", "pls", "--exchange", "1.5"}, "want a fraction Q with 0 ≤ Q ≤ 1"},
		{[]string{"--strategy", "pls", "--exchange", "-0.1"}, "want a fraction Q with 0 ≤ Q ≤ 1"},
		{[]string{"--strategy", "local", "--partition", "striped"}, "want random or contiguous"},
		{[]string{"--strategy", "local", "--exchange", "0.2"}, "--exchange applies to --strategy pls only"},
		{[]string{"--exchange", "0.2"}, "--exchange applies to --strategy pls only"},
		{[]string{"--partition", "contiguous"}, "--partition applies to --strategy local, pls, grab and cdgrab only"},
	}
	for _, c := range cases {
		args := append([]string{"order", src, "--seed", "1", "--cache-dir", t.TempDir()}, c.args...)
		_, stderr, code := run(args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("corgifs %s: exit %d, stderr %q; want an error containing %q", strings.Join(args, " "), code, stderr, c.want)
		}
	}
}
