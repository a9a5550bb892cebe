package shuffler

import (
	"fmt"

	"github.com/corgifs/corgifs/index"
)

// A probed index (blockcache's --index probe) knows the byte range of
// every block but not, for most formats, the records in it: a block's
// Records is 0 until the loader has loaded it. Plans of whole blocks need
// no counts: their sizes are bytes, and the record permutation of a
// buffer is permute(n, Buffer.Seed), a pure function of the seed and the
// count n, which the stream takes from the loaded buffer. So a buffer
// whose count is unknown at planning (Count -1) is served exactly as the
// same buffer of a fully indexed mount, whose count is the same n.
// Strategies that read single records, feedback strategies, which order
// records by id, and --equal-parts, which pads parts to a record count,
// need every record of the index.

// checkProbed refuses what a probed index cannot plan.
func checkProbed(ix *index.Index, p Params, s strategyInfo) error {
	switch {
	case !ix.Probed:
	case s.records:
		return fmt.Errorf("strategy %s reads records one at a time, which needs every record indexed: use {index} full (this index was probed)", p.Strategy)
	case IsFeedback(p.Strategy):
		return fmt.Errorf("strategy %s orders records by their feedback, which needs every record indexed: use {index} full (this index was probed)", p.Strategy)
	case p.EqualParts:
		return fmt.Errorf("{equal-parts} pads parts to the same record count, which needs every record indexed: use {index} full (this index was probed)")
	}
	return nil
}

// unknownCounts marks the buffers of p that hold a block of unknown
// count, and then p's record count, as unknown (-1).
func unknownCounts(p *Plan, o order, ix *index.Index) {
	if !ix.CountsUnknown || o.Records != nil {
		return
	}
	for i := range p.Buffers {
		b := &p.Buffers[i]
		for _, id := range b.Blocks {
			if ix.Blocks[id].Records == 0 {
				b.Count = -1
				p.Records = -1
				break
			}
		}
	}
}
