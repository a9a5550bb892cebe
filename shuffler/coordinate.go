package shuffler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Decider is an optional capability of a Feedback, found by type
// assertion (feedback.Coordinator, with --coordinate): the orders of a
// feedback strategy's epoch are decided once for all the nodes of a job,
// in a place they share, and every node serves that decision or refuses
// (docs/coordinate.md). Decide returns the orders of the epoch's parts;
// compute computes them on this node, from the previous epoch's feedback
// of all parts (balanced) or as the random reshuffle; served gives the
// served record ids of a part of the previous epoch; saved are the orders
// this node saved earlier, if any, and fromSaved says that they were
// returned. An error means the epoch must not be served.
type Decider interface {
	Decide(ctx context.Context, epoch, parts int, timeout time.Duration, saved [][]int32,
		served func(part int) ([]int32, error), compute func(balanced bool) [][]int32) (orders [][]int32, balanced, fromSaved bool, err error)
}

// decideOrders is feedbackOrders with a Decider: the same orders a single
// mount fed every part's feedback would compute, computed by one node and
// followed by all.
func (pl *Planner) decideOrders(seq *sequence, fb *fbOrders, epoch, parts int, d Decider, log *slog.Logger) {
	var saved [][]int32
	if pl.loadOrders(seq, fb, epoch, parts) {
		saved = slices.Clone(fb.orders)
		clear(fb.orders)
	}
	served := func(part int) ([]int32, error) {
		p, err := pl.Acquire(epoch-1, part, parts)
		if err != nil {
			return nil, err
		}
		defer pl.Release(p)
		return pl.RecordIDs(p), nil
	}
	compute := func(balanced bool) [][]int32 {
		o := &fbOrders{orders: make([][]int32, parts)}
		switch {
		case pl.p.Strategy == "corgipile-balance":
			pl.balanceBuffers(seq, o, epoch, parts, balanced)
		case balanced:
			pl.balanceParts(seq, o, epoch, parts, log)
		default:
			for i := range parts {
				o.orders[i] = pl.reshuffle(seq, epoch, i, parts)
			}
		}
		return o.orders
	}
	orders, balanced, fromSaved, err := d.Decide(pl.ctx, epoch, parts, pl.p.FeedbackTimeout, saved, served, compute)
	if err != nil {
		if pl.ctx.Err() != nil {
			// Unmounting: the random order is neither counted nor saved.
			log.Info("unmounting while waiting for the epoch's decision")
			return
		}
		seq.fbErr = err
		return
	}
	if len(orders) != parts {
		seq.fbErr = fmt.Errorf("epoch %d: the decision holds the orders of %d parts, not %d", epoch, len(orders), parts)
		return
	}
	for i, o := range orders {
		if !pl.fits(seq, o, epoch, i, parts) {
			seq.fbErr = fmt.Errorf("epoch %d: the decided order of part %d of %d is not an order of the part's records on this node (another dataset, seed or strategy?): refusing to serve it", epoch, i, parts)
			log.Error("the decided order does not fit this node's part: refusing to serve the epoch", "part", i, "err", seq.fbErr)
			return
		}
	}
	copy(fb.orders, orders)
	if fromSaved {
		return
	}
	if !balanced {
		pl.p.Feedback.CountFallback()
	}
	pl.saveOrders(fb, epoch, parts, log)
}
