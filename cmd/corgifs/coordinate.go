package main

import (
	"flag"
	"fmt"
	"strconv"
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
