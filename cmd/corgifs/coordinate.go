package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/corgifs/corgifs/source/s3"
)

// coordinateFlags are --coordinate and --coordinate-rank: the nodes of a
// job that mount the same dataset with a feedback strategy decide each
// epoch's orders together, in a directory they all reach
// (docs/coordinate.md).
type coordinateFlags struct {
	dir  string
	rank int // -1 when not given
	// registered: only mount has the flags.
	registered bool
	// coord is what openCoordinate made of the store, nil without
	// --coordinate.
	coord *feedback.Coordinator
}

func (c *coordinateFlags) register(fs *flag.FlagSet) {
	c.rank, c.registered = -1, true
	fs.StringVar(&c.dir, "coordinate", "", "a `directory` every node of the job reaches and may write (a shared file system),\n"+
		"or s3://bucket/prefix of a store with conditional PUT (If-None-Match: *; --s3-* flags apply),\n"+
		"a fresh one per training run: with --strategy grab, cdgrab or corgipile-balance each node\n"+
		"publishes the feedback its trainer writes there, the node of --coordinate-rank 0 computes\n"+
		"each epoch's orders from all parts' feedback, and every node serves that one decision or\n"+
		"refuses (EIO); see docs/coordinate.md")
	fs.Func("coordinate-rank", "this node's `rank` among the nodes sharing --coordinate, unique per node:\n"+
		"0 is the order server (required with --coordinate)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("want 0 (the order server) or a larger integer")
		}
		c.rank = n
		return nil
	})
}

// check refuses --coordinate where it cannot apply.
func (c *coordinateFlags) check(strategy string) error {
	switch {
	case !c.registered:
		return nil
	case c.dir == "" && c.rank >= 0:
		return fmt.Errorf("--coordinate-rank %d needs --coordinate DIR", c.rank)
	case c.dir == "":
		return nil
	case !shuffler.IsFeedback(strategy):
		return fmt.Errorf("--coordinate applies to --strategy grab, cdgrab and corgipile-balance only, not %s: the orders of the other strategies are pure functions of the seed, the same on every node without coordination", strategy)
	case strings.Contains(c.dir, "://") && !s3.IsURL(c.dir):
		return fmt.Errorf("--coordinate %s: want a directory or s3://bucket/prefix", c.dir)
	case c.rank < 0:
		return fmt.Errorf("--coordinate %s needs --coordinate-rank N: 0 on the one node that computes the orders, 1, 2, ... on the others", c.dir)
	}
	return nil
}

// openCoordinate makes the feedback store coordinate, when --coordinate
// is given; called whenever the store is opened again.
func (d *datasetFlags) openCoordinate(log *slog.Logger) error {
	c := &d.coordinate
	c.coord = nil
	if c.dir == "" || d.feedback == nil {
		return nil
	}
	var sh feedback.Shared
	var err error
	if s3.IsURL(c.dir) {
		// The --s3-* flags and the AWS settings, as for an s3:// SRC.
		sh, err = s3.NewShared(context.Background(), c.dir, d.s3.config(log))
	} else {
		sh, err = feedback.OpenDirShared(c.dir)
	}
	if err != nil {
		return fmt.Errorf("--coordinate %s: %w", c.dir, err)
	}
	if c.coord, err = d.feedback.Coordinate(feedback.CoordinateOptions{Shared: sh, Rank: c.rank}); err != nil {
		return err
	}
	role := "follower: serves the decisions of rank 0"
	if c.rank == 0 {
		role = "order server: decides each epoch's orders for all nodes"
	}
	log.Info("coordinating feedback strategy epochs", "coordinate", sh.String(), "rank", c.rank, "role", role)
	return nil
}

// planAhead lets the order server plan epoch e+1 as soon as its mount
// accepts feedback of epoch e.
func (d *datasetFlags) planAhead(pl *shuffler.Planner, log *slog.Logger) {
	if d.coordinate.coord == nil {
		return
	}
	d.coordinate.coord.PlanNext(func(epoch, parts int) {
		if _, err := pl.Plan(epoch, 0, parts); err != nil {
			log.Warn("could not plan the next epoch ahead", "epoch", epoch, "parts", parts, "err", err)
		}
	})
}
