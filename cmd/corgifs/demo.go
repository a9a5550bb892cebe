package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/corgifs/corgifs/datagen"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/tfexample"
	"github.com/dustin/go-humanize"
)

func runDemo(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("demo", "", `Makes a label-clustered synthetic dataset in a temporary directory, mounts
it with corgifs (in a child process), reads a few epochs like a trainer
would, and shows that every epoch holds each record once, in a well mixed
order, at the speed of a sequential read.`, stderr)
	records := fset.Int("records", 200000, "records in the dataset")
	epochs := fset.Int("epochs", 3, "epochs to read")
	strategy := fset.String("strategy", "corgipile", "order strategy to mount with")
	keep := fset.Bool("keep", false, "keep the temporary directory")
	if _, err := parse(fset, args, 0); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "corgifs-demo-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	ctx := context.Background()
	fmt.Fprintf(stdout, "1. dataset: %d records, 4 classes, sorted by label, in 8 TFRecord files\n", *records)
	sum, err := datagen.Synthetic{Records: *records, Features: 32, Classes: 4, Clustered: true, Files: 8, Seed: 1}.Write(ctx, src, nil)
	if err != nil {
		return err
	}
	srcOrder, err := labelsOfDir(src)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "   %s in %s; source order: %s\n", humanize.IBytes(uint64(sum.Bytes)), src, describe(srcOrder, 4))

	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "2. corgifs mount %s %s --strategy %s --seed 7 --block-size 256KiB --buffer 10%%\n", src, mnt, *strategy)
	cmd := exec.Command(self, "mount", src, mnt, "--strategy", *strategy, "--seed", "7", "--block-size", "256KiB",
		"--buffer", "10%", "--epochs", fmt.Sprint(*epochs), "--cache-dir", filepath.Join(dir, "cache"))
	logf, err := os.Create(filepath.Join(dir, "mount.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the demo dies (Ctrl-C, a closed pipe), the daemon unmounts too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	if err := waitMounted(mnt, 30*time.Second); err != nil {
		log, _ := os.ReadFile(logf.Name())
		return fmt.Errorf("%w\n%s", err, log)
	}
	fmt.Fprintf(stdout, "3. reading %s/epoch-NNNN/part-00000-of-00001.tfrecord like a trainer would\n", mnt)
	for e := range *epochs {
		path := filepath.Join(mnt, fmt.Sprintf("epoch-%04d", e), "part-00000-of-00001.tfrecord")
		start := time.Now()
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		secs := time.Since(start).Seconds()
		labels, ids, err := decodeLabels(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		once := exactlyOnce(ids, *records)
		fmt.Fprintf(stdout, "   epoch %d: %s in %.2fs (%s/s), each record exactly once: %v\n            order: %s\n",
			e, humanize.IBytes(uint64(len(data))), secs, humanize.IBytes(uint64(float64(len(data))/secs)), once, describe(labels, 4))
	}
	stats, _ := os.ReadFile(filepath.Join(mnt, ".corgifs", "stats.json"))
	fmt.Fprintf(stdout, "4. %s/.corgifs/stats.json:\n%s", mnt, stats)
	fmt.Fprintf(stdout, "The 'mix error' is the largest gap, over windows of 1%% of the records and over labels,\nbetween a label's share in the window and its share overall: 0%% is a perfect mix.\n")
	return nil
}

func waitMounted(mnt string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(mnt, ".corgifs", "config.json")); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s was not mounted after %v", mnt, d)
}

func labelsOfDir(dir string) ([]int64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.tfrecord"))
	if err != nil {
		return nil, err
	}
	var all []int64
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		l, _, err := decodeLabels(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		all = append(all, l...)
	}
	return all, nil
}

// decodeLabels returns the label and id of every record of a TFRecord file.
func decodeLabels(data []byte) (labels, ids []int64, err error) {
	starts, err := formats.Split(data, 0, nil)
	if err != nil {
		return nil, nil, err
	}
	var v []int64
	for _, s := range starts {
		p := formats.Payload(data[s:])
		for _, name := range []string{"label", "id"} {
			f, ok, err := tfexample.Lookup(p, name)
			if err != nil || !ok {
				return nil, nil, fmt.Errorf("record at %d: feature %q missing or bad: %v", s, name, err)
			}
			if v, err = f.AppendInt64s(v[:0]); err != nil || len(v) != 1 {
				return nil, nil, fmt.Errorf("record at %d: feature %q: %v", s, name, err)
			}
			if name == "label" {
				labels = append(labels, v[0])
			} else {
				ids = append(ids, v[0])
			}
		}
	}
	return labels, ids, nil
}

func exactlyOnce(ids []int64, n int) bool {
	if len(ids) != n {
		return false
	}
	seen := make([]bool, n)
	for _, id := range ids {
		if id < 0 || id >= int64(n) || seen[id] {
			return false
		}
		seen[id] = true
	}
	return true
}

// describe shows the first labels and the mix error of an order.
func describe(labels []int64, classes int) string {
	head := ""
	for i := 0; i < len(labels) && i < 32; i++ {
		head += fmt.Sprint(labels[i])
	}
	return fmt.Sprintf("first labels %s…, mix error %.1f%%", head, 100*mixError(labels, classes, max(1, len(labels)/100)))
}

// mixError is the largest difference, over windows of w records and over
// labels, between a label's share in the window and its overall share.
func mixError(labels []int64, classes, w int) float64 {
	total := make([]float64, classes)
	for _, l := range labels {
		total[l]++
	}
	var worst float64
	count := make([]float64, classes)
	for lo := 0; lo+w <= len(labels); lo += w {
		clear(count)
		for _, l := range labels[lo : lo+w] {
			count[l]++
		}
		for c := range classes {
			d := count[c]/float64(w) - total[c]/float64(len(labels))
			worst = max(worst, d, -d)
		}
	}
	return worst
}
