package tune

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// randomReads is the load of a probe, of local files or of remote
// objects: one worker per buffer in bufs, each reading into its buffer at
// slots drawn at random from the eligible files, until budget bytes are
// claimed, o.Time has passed or ctx ends. weights holds the cumulative
// count of slots of each eligible file; read reads slot of eligible file
// j into buf, returning the error to report if it read less than
// len(buf). It fills t's Seconds, Reads, Bytes and MBps.
func randomReads(ctx context.Context, t Throughput, o ProbeOptions, budget int64, weights []int64, salt uint64, bufs [][]byte,
	read func(buf []byte, j int, slot int64) (int, error), progress func(int64)) (Throughput, error) {
	slots := weights[len(weights)-1]
	var issued, bytes, reads atomic.Int64
	var firstErr error
	var emu sync.Mutex
	deadline := time.Now().Add(o.Time)
	start := time.Now()
	var wg sync.WaitGroup
	for w, buf := range bufs {
		size := int64(len(buf))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, salt<<16|uint64(w)))
			for {
				// Claim a read first, so that the budget is not overshot by
				// the reads in flight.
				if issued.Add(size)-size >= budget || time.Now().After(deadline) || ctx.Err() != nil {
					return
				}
				k := rng.Int64N(slots)
				j := 0
				for weights[j] <= k {
					j++
				}
				var prev int64
				if j > 0 {
					prev = weights[j-1]
				}
				n, err := read(buf, j, k-prev)
				if err != nil {
					emu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					emu.Unlock()
					return
				}
				bytes.Add(int64(n))
				reads.Add(1)
				progress(int64(n))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return t, firstErr
	}
	if err := ctx.Err(); err != nil {
		return t, err
	}
	t.Seconds = time.Since(start).Seconds()
	t.Reads, t.Bytes = reads.Load(), bytes.Load()
	if t.Seconds > 0 {
		t.MBps = float64(t.Bytes) / t.Seconds / 1e6
	}
	return t, nil
}

// probeProgress returns the progress callback of a probe's workers, which
// adds up their bytes and reports the sum to o.Progress one call at a time,
// and the total it counts to: each size's budget, as far as files hold
// reads of that size.
func probeProgress(o ProbeOptions, files []ProbeFile) (func(int64), int64) {
	var total int64
	for _, s := range o.Sizes {
		total += min(o.Bytes, eligible(files, s))
	}
	var done atomic.Int64
	var pmu sync.Mutex
	return func(n int64) {
		d := done.Add(n)
		if o.Progress != nil {
			pmu.Lock()
			o.Progress(d, total)
			pmu.Unlock()
		}
	}, total
}
