// Command shufflecopy is the Shuffle Once baseline of the corgifs benchmark:
// what a user does instead of a shuffling file system — make a shuffled copy
// of the dataset once, then read the copy sequentially every epoch. It reads
// every source file whole, checks both CRCs of every record (as a TFRecord
// reader does), puts the records in a uniformly random order and writes them
// verbatim into --files new TFRecord files in OUT, flushing each file to
// disk (fsync) before it exits. Everything is held in memory, which is the
// fastest way to do it when the dataset fits. It prints the records and
// bytes written and the seconds taken as one JSON line.
//
// Usage: shufflecopy [--files N] [--seed S] OUT SRCFILE...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/corgifs/corgifs/formats"
)

func main() {
	files := flag.Int("files", 16, "output files")
	seed := flag.Uint64("seed", 1, "seed of the random order")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: shufflecopy [--files N] [--seed S] OUT SRCFILE...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 || *files < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Args()[1:], *files, *seed); err != nil {
		fmt.Fprintf(os.Stderr, "shufflecopy: %v\n", err)
		os.Exit(1)
	}
}

func run(out string, srcs []string, nfiles int, seed uint64) error {
	start := time.Now()
	var frames [][]byte
	var starts []int64
	for _, p := range srcs {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		starts, err = formats.Split(data, 0, starts[:0])
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for i, s := range starts {
			end := int64(len(data))
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			frames = append(frames, data[s:end])
		}
	}
	readSecs := time.Since(start).Seconds()

	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var written int64
	for f := range nfiles {
		lo, hi := f*len(frames)/nfiles, (f+1)*len(frames)/nfiles
		path := filepath.Join(out, fmt.Sprintf("shuffled-%05d-of-%05d.tfrecord", f, nfiles))
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		w := bufio.NewWriterSize(fh, 1<<20)
		for _, fr := range frames[lo:hi] {
			n, _ := w.Write(fr)
			written += int64(n)
		}
		err = w.Flush()
		if err == nil {
			err = fh.Sync()
		}
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"records": len(frames), "bytes": written, "seconds": time.Since(start).Seconds(), "read_seconds": readSecs,
	})
}
