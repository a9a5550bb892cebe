//go:build linux

// Command randread is the map-style baseline of the corgifs benchmark: what
// a PyTorch user with a map-style Dataset over TFRecord files would do
// instead of a shuffling file system. It reads the record list of a dataset
// ('file offset length' lines, as printed by `corgifs order SRC --strategy
// none`), puts it in a uniformly random order and reads every record with
// its own pread, from --workers goroutines (like DataLoader workers), each
// into its own buffer. It prints the records and bytes read and the seconds
// the reads took (after the list was parsed and shuffled) as one JSON line.
//
// Usage: randread [--workers N] [--seed S] SRC ORDERFILE
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type record struct {
	file int32
	off  int64
	n    int32
}

func main() {
	workers := flag.Int("workers", 4, "goroutines issuing preads")
	seed := flag.Uint64("seed", 1, "seed of the random order")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: randread [--workers N] [--seed S] SRC ORDERFILE\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 || *workers < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *workers, *seed); err != nil {
		fmt.Fprintf(os.Stderr, "randread: %v\n", err)
		os.Exit(1)
	}
}

func run(src, orderPath string, workers int, seed uint64) error {
	recs, names, err := readOrder(orderPath)
	if err != nil {
		return err
	}
	files := make([]*os.File, len(names))
	for i, n := range names {
		f, err := os.Open(filepath.Join(src, n))
		if err != nil {
			return err
		}
		defer f.Close()
		files[i] = f
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })

	start := time.Now()
	var next, bytes atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			for i := next.Add(1) - 1; i < int64(len(recs)); i = next.Add(1) - 1 {
				rec := recs[i]
				if int(rec.n) > len(buf) {
					buf = make([]byte, rec.n)
				}
				m, err := files[rec.file].ReadAt(buf[:rec.n], rec.off)
				if err != nil {
					errs[w] = fmt.Errorf("%s at %d: %w", names[rec.file], rec.off, err)
					return
				}
				bytes.Add(int64(m))
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"records": len(recs), "bytes": bytes.Load(), "seconds": secs, "workers": workers,
	})
}

// readOrder parses 'file offset length' lines.
func readOrder(path string) ([]record, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var recs []record
	var names []string
	ids := map[string]int32{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			return nil, nil, fmt.Errorf("%s:%d: want 'file offset length'", path, line)
		}
		off, err1 := strconv.ParseInt(fs[1], 10, 64)
		n, err2 := strconv.ParseInt(fs[2], 10, 32)
		if err1 != nil || err2 != nil || off < 0 || n < 0 {
			return nil, nil, fmt.Errorf("%s:%d: bad offset or length", path, line)
		}
		id, ok := ids[fs[0]]
		if !ok {
			id = int32(len(names))
			ids[fs[0]] = id
			names = append(names, fs[0])
		}
		recs = append(recs, record{file: id, off: off, n: int32(n)})
	}
	return recs, names, sc.Err()
}
