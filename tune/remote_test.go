package tune

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"
)

func TestProbeRemoteBoundsTheBuffersInFlightSkipsSizesNoObjectHasAndRecommendsAMeasuredConcurrency(t *testing.T) {
	obj := bytes.NewReader(make([]byte, 40<<20))
	small := bytes.NewReader(make([]byte, 1<<20))
	files := []RemoteFile{{Name: "s3://b/big", Size: 40 << 20, R: obj}, {Name: "s3://b/small", Size: 1 << 20, R: small}}
	rep, err := ProbeRemote(context.Background(), files, ProbeOptions{
		Sizes: []int64{64 << 10, 8 << 20, 32 << 20, 64 << 20}, Bytes: 64 << 20, Time: time.Second, InFlight: 64, Rounds: 1, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Remote || len(rep.Sizes) != 4 {
		t.Fatalf("report %+v: want a remote report of the 4 sizes", rep)
	}
	for _, s := range rep.Sizes {
		switch {
		case s.BlockSize == 64<<20 && s.Skipped == "":
			t.Errorf("64 MiB is larger than every object, yet measured: %+v", s)
		case s.BlockSize < 64<<20 && (s.Skipped != "" || s.Reads == 0):
			t.Errorf("size %d not measured: %+v", s.BlockSize, s)
		case s.BlockSize < 64<<20 && int64(s.InFlight)*s.BlockSize > remoteBufferBytes:
			t.Errorf("size %d: %d reads in flight hold more than %d bytes of buffers", s.BlockSize, s.InFlight, remoteBufferBytes)
		}
	}
	if i := slices.IndexFunc(rep.Sizes, func(s Throughput) bool { return s.BlockSize == rep.Recommended }); i < 0 || rep.Sizes[i].Skipped != "" {
		t.Fatalf("recommended %d, not a measured size", rep.Recommended)
	}
	var counts []int
	for _, s := range rep.InFlight {
		if s.BlockSize != rep.Recommended {
			t.Errorf("in-flight row %+v is not of the recommended size %d", s, rep.Recommended)
		}
		counts = append(counts, s.InFlight)
	}
	if !slices.Contains(counts, rep.Concurrency) {
		t.Fatalf("recommended concurrency %d is not one of those measured (%v)", rep.Concurrency, counts)
	}
}
