// Command corgifs-plot draws the reports of `corgifs validate` and
// `corgifs herding` as SVG or PNG. It is a command of its own so that the
// corgifs daemon does not link gonum/plot and its fonts (most of a
// binary's size): `corgifs validate --plot FILE` and `corgifs herding
// --plot FILE` run it with the report on its standard input.
//
// Usage:
//
//	corgifs-plot validate [--zoom=false] REPORT.json OUT.svg|OUT.png
//	corgifs-plot herding [--train] RESULT.json OUT.svg|OUT.png
//
// REPORT.json is what `corgifs validate --json` writes; - reads standard
// input.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/corgifs/corgifs/herding"
	"github.com/corgifs/corgifs/internal/charts"
	"github.com/corgifs/corgifs/validator"
)

const usage = `usage:
  corgifs-plot validate [--zoom=false] REPORT.json OUT.svg|OUT.png
  corgifs-plot herding [--train] RESULT.json OUT.svg|OUT.png
REPORT.json: as written by corgifs validate --json (- reads standard input).
`

func main() {
	if err := run(os.Args[1:], os.Stdin); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "corgifs-plot: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader) error {
	if len(args) == 0 {
		//lint:ignore ST1005 the message is the usage text, which ends with a newline
		return errors.New("no command\n" + usage)
	}
	fs := flag.NewFlagSet("corgifs-plot "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	zoom := fs.Bool("zoom", true, "validate: let the axes span the measured values; false: accuracy on 0 to 1, loss from 0")
	train := fs.Bool("train", false, "herding: the input is a --train result (losses per epoch)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%s: want an input file and an output file, got %d arguments\n%s", args[0], fs.NArg(), usage)
	}
	in, out := fs.Arg(0), fs.Arg(1)
	switch args[0] {
	case "validate":
		var r validator.Report
		if err := decode(in, stdin, &r); err != nil {
			return err
		}
		return charts.ValidationWith(r, out, charts.ValidationOptions{Zoom: *zoom})
	case "herding":
		if *train {
			var r herding.TrainResult
			if err := decode(in, stdin, &r); err != nil {
				return err
			}
			return charts.HerdingTraining(r, out)
		}
		var r herding.Result
		if err := decode(in, stdin, &r); err != nil {
			return err
		}
		return charts.Herding(r, out)
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

// decode reads the JSON document of the file name (- for stdin) into v.
func decode(name string, stdin io.Reader, v any) error {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return fmt.Errorf("reading %s: %w (want the JSON that corgifs writes)", name, err)
	}
	return nil
}
