package tune

import (
	"slices"
	"time"
)

// DefaultSizes are the block sizes Probe measures by default: 64 KiB to
// 32 MiB, doubling.
func DefaultSizes() []int64 {
	var s []int64
	for n := int64(64 << 10); n <= 32<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

// ProbeFile is one source file to read.
type ProbeFile struct {
	Path string
	Size int64
}

// ProbeOptions bound a storage probe.
type ProbeOptions struct {
	Sizes    []int64       // block sizes to measure (default DefaultSizes)
	Bytes    int64         // bytes read per size at most (default 256 MiB)
	Time     time.Duration // time spent per size at most (default 10 s)
	InFlight int           // reads in flight at once (default 8)
	Rounds   int           // passes over all sizes; a size's figure is their median (default 3)
	Seed     uint64        // chooses the offsets
	// Floor is the smallest size Recommended may be: a mount reads
	// smaller blocks through the page cache (index.MinDirectBlock),
	// not at the speed direct reads measure.
	Floor int64
	// Progress, if set, is called as bytes are read, with the total
	// the probe reads at most.
	Progress func(done, total int64)
}

func (o *ProbeOptions) fill() {
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultSizes()
	}
	if o.Bytes <= 0 {
		o.Bytes = 256 << 20
	}
	if o.Time <= 0 {
		o.Time = 10 * time.Second
	}
	if o.InFlight <= 0 {
		o.InFlight = 8
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
}

// Throughput is the speed measured at one block size.
type Throughput struct {
	BlockSize int64   `json:"block_size"`
	Reads     int64   `json:"reads"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	// MBps is in 10^6 bytes a second: the median over the rounds.
	MBps float64 `json:"mb_per_s"`
	// InFlight is the reads in flight of a remote probe (ProbeRemote).
	InFlight int `json:"in_flight,omitempty"`
	// Skipped says why the size was not measured (no file that large).
	Skipped string `json:"skipped,omitempty"`
}

// StorageReport is what Probe found.
type StorageReport struct {
	Sizes []Throughput `json:"sizes"`
	// Direct is false when the file system refused O_DIRECT and the
	// files were read through the page cache.
	Direct bool `json:"direct"`
	// Cached is the fraction of the files' bytes that were in the page
	// cache before the probe (-1 when it could not be told).
	Cached float64 `json:"cached"`
	// Warm is set when the figures are the page cache's rather than the
	// storage's: read through the page cache while much of it was there.
	Warm bool `json:"warm"`
	// Smallest is the smallest block size within 10% of the best, the
	// paper's rule; Recommended the same among sizes of at least
	// ProbeOptions.Floor.
	Smallest    int64 `json:"smallest"`
	Recommended int64 `json:"recommended"`
	Best        int64 `json:"best"`

	// Remote is set by ProbeRemote: the figures are of ranged GETs of an
	// object store. InFlight then holds the recommended size measured
	// with fewer requests in flight, and Concurrency is the fewest within
	// 10% of the best: the --s3-concurrency to mount with.
	Remote      bool         `json:"remote,omitempty"`
	InFlight    []Throughput `json:"in_flight,omitempty"`
	Concurrency int          `json:"concurrency,omitempty"`
}

// Recommend returns the smallest measured block size of at least floor
// whose throughput is at least 90% of the best of all sizes (the fastest
// size of at least floor if none is), and the best.
func Recommend(sizes []Throughput, floor int64) (rec, best int64) {
	var top, topFloor float64
	var bestFloor int64
	for _, t := range sizes {
		if t.Skipped != "" {
			continue
		}
		if t.MBps > top {
			top, best = t.MBps, t.BlockSize
		}
		if t.BlockSize >= floor && t.MBps > topFloor {
			topFloor, bestFloor = t.MBps, t.BlockSize
		}
	}
	for _, t := range sizes {
		if t.Skipped == "" && t.BlockSize >= floor && t.MBps >= 0.9*top && (rec == 0 || t.BlockSize < rec) {
			rec = t.BlockSize
		}
	}
	if rec == 0 {
		rec = bestFloor
	}
	return rec, best
}

// median sums the reads, bytes and seconds of the rounds of one size,
// and takes the median of their throughputs.
func median(ts []Throughput) Throughput {
	t := ts[0]
	if t.Skipped != "" {
		return t
	}
	speeds := []float64{t.MBps}
	for _, u := range ts[1:] {
		t.Reads += u.Reads
		t.Bytes += u.Bytes
		t.Seconds += u.Seconds
		speeds = append(speeds, u.MBps)
	}
	slices.Sort(speeds)
	if n := len(speeds); n%2 == 1 {
		t.MBps = speeds[n/2]
	} else {
		t.MBps = (speeds[n/2-1] + speeds[n/2]) / 2
	}
	return t
}

// eligible returns the bytes of the files at least size long.
func eligible(files []ProbeFile, size int64) int64 {
	var n int64
	for _, f := range files {
		if f.Size >= size {
			n += f.Size
		}
	}
	return n
}
