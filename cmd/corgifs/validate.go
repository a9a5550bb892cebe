package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/validator"
	"github.com/dustin/go-humanize"
)

// validateFlags are the training settings of validate (and demo).
type validateFlags struct {
	data, test      string
	model           string
	strategies      listFlag
	epochs, batch   int
	lr, decay, l2   float64
	label, features string
	via             string
	jsonOut, plot   string
}

func (v *validateFlags) register(fs *flag.FlagSet) {
	v.strategies = listFlag{"none", "window", "block", "corgipile", "once", "full"}
	fs.StringVar(&v.data, "data", "", "`dir`ectory of training TFRecord files (required)")
	fs.StringVar(&v.test, "test", "", "`dir`ectory of test TFRecord files (required)")
	fs.StringVar(&v.model, "model", "softmax", "`model`: "+strings.Join(validator.ModelNames(), ", "))
	fs.Var(&v.strategies, "strategies", "comma separated order `strategies` to train with, side by side")
	fs.IntVar(&v.epochs, "epochs", 10, "training epochs per strategy")
	fs.IntVar(&v.batch, "batch", 64, "mini-batch size (1: plain SGD, one record per update)")
	fs.Float64Var(&v.lr, "lr", 0.05, "learning rate of epoch 0")
	fs.Float64Var(&v.decay, "decay", validator.DefaultDecay, "learning rate decay per epoch: lr * decay^epoch")
	fs.Float64Var(&v.l2, "l2", 0, "L2 regularisation strength")
	fs.StringVar(&v.label, "label", "label", "`name` of the int64_list label feature")
	fs.StringVar(&v.features, "features", "features", "`name` of the feature vector: a float_list, or a bytes_list of uint8 pixels")
	fs.StringVar(&v.via, "via", "mount", "how epochs are read: mount (through a real corgifs mount) or direct (the same bytes, in-process)")
	fs.StringVar(&v.jsonOut, "json", "", "write the results as JSON to `file`")
	fs.StringVar(&v.plot, "plot", "", "draw test accuracy and training loss per epoch to `file` (.svg or .png)")
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("validate", "", `Trains one model per order strategy, from the same initial weights, on the
records of --data in that strategy's order (epoch e reads epoch-e's single part),
and prints per epoch and strategy: training loss, training accuracy, test
accuracy on --test, and seconds. It shows whether an order trains like a full
shuffle. The dataset flags mean what they mean for mount.`, stderr)
	var d datasetFlags
	d.register(fset, true)
	var v validateFlags
	v.register(fset)
	if _, err := parse(fset, args, 0); err != nil {
		return err
	}
	if v.data == "" || v.test == "" {
		return fmt.Errorf("--data and --test are required")
	}
	if err := d.checkCacheDir(); err != nil {
		return err
	}
	log := newLogger(stderr, d.debug)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := validate(ctx, &d, &v, log)
	if err != nil {
		return err
	}
	return writeReport(stdout, report, &v)
}

func writeReport(stdout io.Writer, report validator.Report, v *validateFlags) error {
	if err := validator.WriteTable(stdout, report); err != nil {
		return err
	}
	if v.jsonOut != "" {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(v.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if v.plot != "" {
		if err := validator.Plot(report, v.plot); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "plot written to %s\n", v.plot)
	}
	return nil
}

// validate trains one model per strategy and returns the results.
func validate(ctx context.Context, d *datasetFlags, v *validateFlags, log *slog.Logger) (validator.Report, error) {
	var report validator.Report
	if v.via != "mount" && v.via != "direct" {
		return report, fmt.Errorf("--via %q: want mount or direct", v.via)
	}
	for _, s := range v.strategies {
		if _, ok := shuffler.Describe[s]; !ok {
			return report, fmt.Errorf("unknown strategy %q in --strategies (choose from %s)", s, strings.Join(shuffler.Strategies(), ", "))
		}
	}
	dec := validator.Decoder{Label: v.label, Features: v.features}
	testFiles, err := tfrecordFiles(v.test)
	if err != nil {
		return report, err
	}
	test, err := validator.LoadTestSet(dec, testFiles...)
	if err != nil {
		return report, err
	}
	classes := test.Classes()
	if v.model != validator.Softmax {
		classes = 2
	}
	// Index once, so every strategy (and every child mount) uses the sidecar.
	seed, chosen, err := d.parseSeed()
	if err != nil {
		return report, err
	}
	if chosen {
		log.Info("no --seed given; chose one (pass it to reproduce these orders)", "seed", seed)
		d.seed = fmt.Sprint(seed)
	}
	ix, _, err := blockcache.Open(ctx, v.data, d.indexOptions(log, os.Stderr))
	if err != nil {
		return report, err
	}
	log.Info("training", "records", ix.Records, "bytes", humanize.IBytes(uint64(ix.Bytes)), "test_records", test.Len(),
		"features", test.Dim, "classes", classes, "model", v.model, "via", v.via)
	work, err := os.MkdirTemp("", "corgifs-validate-")
	if err != nil {
		return report, err
	}
	defer os.RemoveAll(work)
	for _, strategy := range v.strategies {
		model, err := validator.NewModel(v.model, test.Dim, classes)
		if err != nil {
			return report, err
		}
		tr := &validator.Trainer{Model: model, Decoder: dec, LR: v.lr, Decay: v.decay, L2: v.l2, Batch: v.batch, Logger: log}
		open, done, err := epochOpener(ctx, d, v, ix, strategy, seed, work)
		if err != nil {
			return report, err
		}
		run, err := tr.Train(ctx, strategy, v.epochs, open, test)
		if derr := done(); err == nil {
			err = derr
		}
		if err != nil {
			return report, err
		}
		report.Runs = append(report.Runs, run)
	}
	return report, nil
}

// epochOpener returns how to open one epoch of a strategy, and how to clean up.
func epochOpener(ctx context.Context, d *datasetFlags, v *validateFlags, ix *blockcache.Index, strategy string, seed uint64, work string) (func(int) (io.ReadCloser, error), func() error, error) {
	if v.via == "mount" {
		flags := []string{"--strategy", strategy, "--seed", fmt.Sprint(seed), "--block-size", fmt.Sprint(int64(d.blockSize)),
			"--buffer", d.buffer.v.String(), "--max-memory", fmt.Sprint(int64(d.maxMemory)), "--cache-dir", d.cacheDir,
			"--include", d.include.String(), "--epochs", fmt.Sprint(v.epochs)}
		if d.skipCorrupt {
			flags = append(flags, "--skip-corrupt")
		}
		m, err := startChildMount(v.data, work, flags...)
		if err != nil {
			return nil, nil, err
		}
		open := func(e int) (io.ReadCloser, error) { return os.Open(m.part(e, 0, 1)) }
		return open, m.stop, nil
	}
	// The budget a mount of this strategy would use, so that the orders
	// are the mount's.
	slabs, _ := memorySplit(ix, int64(d.maxMemory), shuffler.ReadsRecords(strategy))
	pl, err := shuffler.NewPlanner(ix, shuffler.Params{Strategy: strategy, Seed: seed, Buffer: d.buffer.v, MaxMemory: slabs})
	if err != nil {
		return nil, nil, err
	}
	lo := d.loaderOptions(nil)
	lo.MaxMemory = slabs
	ld := blockcache.NewLoader(ix, lo)
	open := func(e int) (io.ReadCloser, error) {
		plan, err := pl.Plan(e, 0, 1)
		if err != nil {
			return nil, err
		}
		return &streamReader{ctx: ctx, s: shuffler.NewStream(pl, ld, plan)}, nil
	}
	return open, func() error { return nil }, nil
}

// streamReader reads a Stream from start to end, as a reader of the mount would.
type streamReader struct {
	ctx context.Context
	s   *shuffler.Stream
	off int64
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.off >= r.s.Size() {
		return 0, io.EOF
	}
	n, err := r.s.ReadAt(r.ctx, p, r.off)
	r.off += int64(n)
	return n, err
}

func (r *streamReader) Close() error { r.s.Close(); return nil }

func tfrecordFiles(dir string) ([]string, error) {
	var files []string
	for _, pat := range blockcache.DefaultInclude {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no TFRecord files in %s", dir)
	}
	return files, nil
}
