package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/corgifs/corgifs/grab"
	"github.com/corgifs/corgifs/herding"
)

func runHerding(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("herding", "", `Reproduces the parallel-herding simulation of CD-GraB (Cooper et al.,
NeurIPS 2023): --workers workers each hold --n random unit vectors of --dim
dimensions (Gaussian, normalised, each worker's centred by its mean). Every
round each method picks the workers' next orders, and the table shows the
parallel herding bound of the orders: the largest ∞-norm, over the steps t,
of the sum of all workers' vectors served at steps 1..t. Methods: D-RR (a
new random permutation per worker), ID-GraB (Bal) and ID-GraB (PairBal)
(each worker balances its own vectors alone, GraB or PairBalance), and
CD-GraB (one order server balances all workers' pair differences). The
paper's claim: CD-GraB's bound stays small (about 2-3) as m and n grow while
D-RR's grows to hundreds (n=10000, m=100: a CPU-bound run of about a
minute). Round 0 is the vectors in generation order, the same for all.

With --train it instead trains logistic regression by mini-batch SGD in
memory on --examples examples of --features Gaussian features, two classes
stored sorted by label and cut into blocks of --block examples, with four
orders: full (a random reshuffle every epoch), grab (GraB from the previous
epoch's per-example gradients), corgipile (random blocks, shuffled inside
buffers of --buffer of the blocks) and corgipile-balance (the same buffers,
each in PairBalance order of its examples' latest gradients), and prints the
full-pass training loss after every epoch.`, stderr)
	n := fset.Int("n", 1000, "vectors per worker")
	workers := fset.Int("workers", 16, "workers m")
	dim := fset.Int("dim", 16, "dimension d of the vectors")
	rounds := fset.Int("rounds", 10, "reorder rounds after round 0")
	seed := fset.Uint64("seed", 1, "`seed` of the vectors and of the random draws")
	rule := fset.String("balance-rule", "deterministic", "sign rule of the balancing methods: deterministic or randomized")
	plotPath := fset.String("plot", "", "draw the bounds (or with --train the losses) to `file` (.svg or .png)")
	train := fset.Bool("train", false, "train logistic regression with the four orders instead (the flags below)")
	var tc herding.TrainConfig
	fset.IntVar(&tc.N, "examples", 20000, "--train: examples")
	fset.IntVar(&tc.Dim, "features", 18, "--train: features (a bias is added)")
	fset.IntVar(&tc.Block, "block", 100, "--train: examples per block")
	fset.Float64Var(&tc.Buffer, "buffer", 0.1, "--train: share of the blocks in one CorgiPile buffer")
	fset.IntVar(&tc.Epochs, "epochs", 10, "--train: epochs")
	fset.IntVar(&tc.Batch, "batch", 16, "--train: mini-batch size")
	fset.Float64Var(&tc.LR, "lr", 0.1, "--train: learning rate of epoch 0")
	fset.Float64Var(&tc.Decay, "decay", 0.9, "--train: learning rate decay per epoch")
	fset.Float64Var(&tc.Separation, "separation", 1, "--train: distance between the two classes' means")
	if _, err := parse(fset, args, 0); err != nil {
		return err
	}
	if *plotPath != "" {
		if err := checkPlotPath(*plotPath); err != nil {
			return err
		}
	}
	r, ok := grab.ParseRule(*rule)
	if !ok {
		return fmt.Errorf("--balance-rule %q: want deterministic or randomized", *rule)
	}
	if *train {
		tc.Seed, tc.Rule = *seed, r
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		res, err := herding.RunTraining(ctx, tc)
		if err != nil {
			return err
		}
		if err := herding.WriteTrainTable(stdout, res); err != nil {
			return err
		}
		if *plotPath != "" {
			if err := drawPlot(ctx, "herding", res, *plotPath, "--train"); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "plot written to %s\n", *plotPath)
		}
		return nil
	}
	if *n < 1 || *workers < 1 || *dim < 1 || *rounds < 0 {
		return fmt.Errorf("--n, --workers and --dim must be at least 1 and --rounds at least 0")
	}
	if total := int64(*n) * int64(*workers) * int64(*dim); total > 1<<30 {
		return fmt.Errorf("n*workers*dim = %d values: more than the 2^30 the simulation holds in memory (3 copies of 4 bytes each)", total)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := herding.Run(ctx, herding.Config{N: *n, Workers: *workers, Dim: *dim, Rounds: *rounds, Seed: *seed, Rule: r})
	if err != nil {
		return err
	}
	if err := herding.WriteTable(stdout, res); err != nil {
		return err
	}
	if *plotPath != "" {
		if err := drawPlot(ctx, "herding", res, *plotPath); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "plot written to %s\n", *plotPath)
	}
	return nil
}
