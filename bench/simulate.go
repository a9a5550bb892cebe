//go:build linux

package main

import (
	"container/heap"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/corgifs/corgifs/index"
	"github.com/corgifs/corgifs/shuffler"
)

const simulateHeading = "## Scale on paper: partial local shuffling at 64 and 1024 nodes (issue 15)"

// simOptions are the parameters of the simulation (--sim-* flags).
type simOptions struct {
	size      int64 // of the synthetic dataset
	block     int64
	parts     []int
	exchanges []float64
	epochs    int
}

// simRow is one (K, Q): what the nodes fetch and hold, per epoch, and
// what planning costs one node.
type simRow struct {
	k        int
	q        float64
	capacity int64 // of each node's disk cache: (1+Q)·N/K
	part     int64 // bytes of a node's part (the largest)
	// Per epoch, over the K nodes: mean and largest bytes fetched from
	// the source (GETs are blocks fetched: one ranged GET each), and the
	// largest cache size reached so far.
	fetchMean, fetchMax []float64
	getsMean, getsMax   []float64
	peak                []int64
	// One node's planning: seconds for each epoch computed in turn, the
	// seconds of the last epoch from a fresh planner (a node that starts
	// there), the sequence bytes the planner holds, and the Go heap it
	// grew by.
	planSecs  []float64
	coldLast  float64
	seqBytes  int64
	heapBytes int64
}

type simResults struct {
	o      simOptions
	blocks int
	ixHeap int64 // bytes of the index's block table, which every node holds
	rows   []*simRow
	took   time.Duration
}

// syntheticIndex is an index of size bytes in blocks of block bytes and
// no data: one record per block, one file.
func syntheticIndex(size, block int64) *index.Index {
	n := (size + block - 1) / block
	ix := &index.Index{Root: "/simulated", BlockSize: block, Files: []index.File{{Path: "data.tfrecord"}}}
	ix.Blocks = make([]index.Block, n)
	for i := range ix.Blocks {
		l := min(block, size-int64(i)*block)
		ix.Blocks[i] = index.Block{File: 0, Records: 1, Offset: int64(i) * block, Len: l}
	}
	ix.Records, ix.Bytes = n, size
	return ix
}

// runSimulate plans pls for every K and Q on a synthetic index and plays
// each node's reads of its parts, epoch after epoch, through a disk cache
// of (1+Q)·N/K that evicts by Belady's rule.
func runSimulate(o simOptions) (*simResults, error) {
	start := time.Now()
	ix := syntheticIndex(o.size, o.block)
	res := &simResults{o: o, blocks: len(ix.Blocks), ixHeap: int64(len(ix.Blocks)) * int64(unsafe.Sizeof(index.Block{}))}
	for _, k := range o.parts {
		for _, q := range o.exchanges {
			row, err := simulateOne(ix, o, k, q)
			if err != nil {
				return nil, err
			}
			res.rows = append(res.rows, row)
		}
	}
	res.took = time.Since(start)
	return res, nil
}

func simParams(q float64) shuffler.Params {
	return shuffler.Params{Strategy: "pls", Exchange: q, Seed: 1, Buffer: shuffler.BufferSize{Percent: 5}, MaxMemory: 1 << 30}
}

func simulateOne(ix *index.Index, o simOptions, k int, q float64) (*simRow, error) {
	row := &simRow{k: k, q: q}
	// One node's planning, measured on a planner of its own.
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	pl, err := shuffler.NewPlanner(ix, simParams(q))
	if err != nil {
		return nil, err
	}
	for e := range o.epochs {
		t := time.Now()
		p, err := pl.Plan(e, 0, k)
		if err != nil {
			return nil, err
		}
		row.planSecs = append(row.planSecs, time.Since(t).Seconds())
		row.part = max(row.part, p.Size)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	row.seqBytes = pl.Stats().SequenceBytes
	row.heapBytes = int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	runtime.KeepAlive(pl)
	cold, err := shuffler.NewPlanner(ix, simParams(q))
	if err != nil {
		return nil, err
	}
	t := time.Now()
	if _, err := cold.Plan(o.epochs-1, 0, k); err != nil {
		return nil, err
	}
	row.coldLast = time.Since(t).Seconds()

	// Every node's reads, epoch after epoch, from one shared planner.
	reads := make([][]int32, k) // node → its blocks in read order, all epochs
	bounds := make([][]int, k)  // node → where each epoch starts in reads
	var total int64
	for e := range o.epochs {
		for i := range k {
			p, err := pl.Plan(e, i, k)
			if err != nil {
				return nil, err
			}
			bounds[i] = append(bounds[i], len(reads[i]))
			for _, b := range p.Buffers {
				reads[i] = append(reads[i], b.Blocks...)
			}
			if e == 0 {
				total += p.Size
			}
			row.part = max(row.part, p.Size)
		}
	}
	row.capacity = int64(math.Ceil((1 + q) * float64(total) / float64(k)))
	row.fetchMean, row.fetchMax = make([]float64, o.epochs), make([]float64, o.epochs)
	row.getsMean, row.getsMax = make([]float64, o.epochs), make([]float64, o.epochs)
	row.peak = make([]int64, o.epochs)
	for i := range k {
		st := belady(reads[i], bounds[i], ix.BlockBytes, row.capacity)
		for e := range o.epochs {
			row.fetchMean[e] += float64(st.fetched[e]) / float64(k)
			row.fetchMax[e] = max(row.fetchMax[e], float64(st.fetched[e]))
			row.getsMean[e] += float64(st.gets[e]) / float64(k)
			row.getsMax[e] = max(row.getsMax[e], float64(st.gets[e]))
			row.peak[e] = max(row.peak[e], st.peak[e])
		}
		reads[i] = nil
	}
	return row, nil
}

// cacheStats is what one node's disk cache did in each epoch.
type cacheStats struct {
	fetched []int64 // bytes fetched from the source
	gets    []int64 // blocks fetched: one GET each
	peak    []int64 // largest size reached by the end of the epoch
}

// belady plays reads (block ids in read order; epoch e starts at
// bounds[e]) through a cache of capacity bytes that is empty at first.
// A block not cached is fetched; it is kept if there is room, or if room
// can be made by evicting blocks read again later than it (the one read
// again farthest in the future first, Belady's rule); else it is served
// without being kept. Blocks not read again within reads count as read
// again never.
func belady(reads []int32, bounds []int, size func(int32) int64, capacity int64) cacheStats {
	const never = math.MaxInt
	next := make([]int, len(reads))
	last := map[int32]int{}
	for p := len(reads) - 1; p >= 0; p-- {
		if n, ok := last[reads[p]]; ok {
			next[p] = n
		} else {
			next[p] = never
		}
		last[reads[p]] = p
	}
	st := cacheStats{fetched: make([]int64, len(bounds)), gets: make([]int64, len(bounds)), peak: make([]int64, len(bounds))}
	cached := map[int32]int{} // block → its next read
	var h farthest
	var used, peak int64
	e := 0
	for p, b := range reads {
		for e+1 < len(bounds) && p >= bounds[e+1] {
			st.peak[e] = peak
			e++
		}
		nu := next[p]
		if _, ok := cached[b]; ok {
			cached[b] = nu
			heap.Push(&h, use{nu, b})
			continue
		}
		n := size(b)
		st.fetched[e] += n
		st.gets[e]++
		// Evict what is read again later than b, farthest first, while
		// b does not fit.
		for used+n > capacity && h.Len() > 0 {
			top := h[0]
			if nx, ok := cached[top.block]; !ok || nx != top.next {
				heap.Pop(&h) // stale: evicted, or read again since
				continue
			}
			if top.next <= nu {
				break // every cached block is wanted before b
			}
			heap.Pop(&h)
			delete(cached, top.block)
			used -= size(top.block)
		}
		if used+n <= capacity {
			cached[b] = nu
			heap.Push(&h, use{nu, b})
			used += n
			peak = max(peak, used)
		}
	}
	for ; e < len(bounds); e++ {
		st.peak[e] = peak
	}
	return st
}

// use is a cached block and its next read, in a max-heap by next read.
// Entries whose block was read again since are stale and skipped.
type use struct {
	next  int
	block int32
}

type farthest []use

func (h farthest) Len() int           { return len(h) }
func (h farthest) Less(i, j int) bool { return h[i].next > h[j].next }
func (h farthest) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *farthest) Push(x any)        { *h = append(*h, x.(use)) }
func (h *farthest) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *harness) simulateMarkdown(res *simResults) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	o := res.o
	p("%s\n\n", simulateHeading)
	p("Plans are pure, so what K nodes fetch can be computed without the nodes. A synthetic index\n")
	p("of %s (%.2f TB) in %d blocks of %s, no data; for each K and Q, `--strategy pls --exchange Q`\n",
		fmtBytes(o.size), float64(o.size)/1e12, res.blocks, fmtBytes(o.block))
	p("plans every part of epochs 0 to %d (seed 1, `--partition random`), and each node reads its part's\n", o.epochs-1)
	p("blocks in plan order through a disk cache of (1+Q)·N/K bytes, empty at first, that keeps a fetched\n")
	p("block when there is room or when room can be made by evicting blocks read again later than it,\n")
	p("the one read again farthest in the future first (Belady's rule, with the node's own plans of all\n")
	p("%d epochs as the future; the disk cache of `--disk-cache` evicts by the same rule from the plans\n", o.epochs)
	p("of the parts open and their next epochs). A block not cached is fetched with one ranged GET\n")
	p("(blockcache reads a block with one ReadAt, one GET on S3). Per epoch, over the K nodes: bytes\n")
	p("fetched (mean and largest node) against Q·N/K, GETs, and the largest cache size reached so far.\n")
	p("Planning is timed on one node's own planner: each epoch in turn (epoch 0 builds the balanced\n")
	p("assignment of all blocks; later ones step it), and epoch %d from a fresh planner (a node that\n", o.epochs-1)
	p("starts there: stepped from epoch 0). Memory: the planner's sequence bytes (PlanStats) and the Go\n")
	p("heap it grew by; every node also holds the index's block table (%s here).\n\n", fmtBytes(res.ixHeap))
	p("Reproduce (no root, no data; took %s):\n\n", res.took.Round(time.Second))
	p("    go run ./bench --warm=false --simulate --sim-size %s --sim-block %s --sim-parts %s --sim-exchange %s --sim-epochs %d\n\n",
		decimalSize(o.size), formatSize(o.block), joinInts(o.parts), joinFloats(o.exchanges), o.epochs)
	p("| K | Q | N/K | cache (1+Q)·N/K | epoch | fetched per node, mean | largest | × Q·N/K (mean) | GETs per node, mean | largest | peak cache (largest node) |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range res.rows {
		share := float64(o.size) / float64(r.k)
		for e := range o.epochs {
			ratio := "–"
			if e > 0 && r.q > 0 {
				ratio = fmt.Sprintf("%.2f", r.fetchMean[e]/(r.q*share))
			}
			p("| %d | %g | %s | %s | %d | %s | %s | %s | %.0f | %.0f | %s |\n", r.k, r.q, fmtBytes(int64(share)), fmtBytes(r.capacity), e,
				fmtBytes(int64(r.fetchMean[e])), fmtBytes(int64(r.fetchMax[e])), ratio, r.getsMean[e], r.getsMax[e], fmtBytes(r.peak[e]))
		}
	}
	p("\n| K | Q | plan ms per epoch, in turn (one node) | epoch %d from a fresh planner, ms | sequence bytes | heap growth |\n", o.epochs-1)
	p("| ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range res.rows {
		ms := make([]float64, len(r.planSecs))
		for i, s := range r.planSecs {
			ms[i] = 1000 * s
		}
		p("| %d | %g | %s | %.1f | %s | %s |\n", r.k, r.q, join(ms, "%.1f"), 1000*r.coldLast, fmtBytes(r.seqBytes), signedBytes(r.heapBytes))
	}
	return b.String()
}

// decimalSize formats n in decimal units when it is a whole number of
// them (10TB), else as formatSize does.
func decimalSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return formatSize(n)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}
