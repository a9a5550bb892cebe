package feedback

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Coordination of the nodes of one job through a Shared place
// (docs/coordinate.md). Every node publishes the feedback its mount
// accepts; the order server (rank 0) gathers all parts' feedback into its
// own store, computes the next epoch's orders exactly as a single mount
// fed every part would, and publishes them with the epoch's decision;
// every other node follows the decision. When the feedback or the
// decision does not come within the timeout, the fallback is decided
// once too: the first node to create the decision wins, and every node
// follows the decision, never its own clock. Each node publishes the
// digest of the orders it serves and refuses to serve orders whose digest
// is not the decision's.

// CoordinateOptions configure Coordinate.
type CoordinateOptions struct {
	Shared Shared
	// Rank is this node's, unique in the job; rank 0 is the order server.
	Rank int
	// Poll is how often a wait looks at the shared place; 0 means 100 ms.
	Poll time.Duration
}

// Coordinator is a Store whose epochs are decided with the other nodes of
// a job. Its methods are safe for concurrent use.
type Coordinator struct {
	*Store
	sh   Shared
	rank int
	poll time.Duration
	log  *slog.Logger

	mu        sync.Mutex
	planNext  func(epoch, parts int)
	ingesting map[key]bool
	published map[key]bool   // parts known to be in the shared place
	ownParts  int            // parts this node published
	badRemote map[key]string // a shared feedback file refused: why
	warned    map[key]bool   // a shared feedback file could not be taken
	waits     map[ekey]WaitStatus
	decided   map[ekey]bool      // a decision exists
	looked    map[ekey]time.Time // when Complete last found none
	recent    []DecisionStatus
	written   int64 // bytes written to the shared place
	read      int64 // bytes read from it
	ingested  int64 // parts taken from it into the store
}

type ekey struct{ epoch, parts int }

// Coordinate makes the store's epochs decided with the other nodes that
// share o.Shared. Call it before the store serves.
func (s *Store) Coordinate(o CoordinateOptions) (*Coordinator, error) {
	if o.Shared == nil {
		return nil, errors.New("feedback: no shared place to coordinate in")
	}
	if o.Rank < 0 {
		return nil, fmt.Errorf("{coordinate-rank} %d: want 0 (the order server) or more", o.Rank)
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	c := &Coordinator{Store: s, sh: o.Shared, rank: o.Rank, poll: o.Poll, log: s.log.With("coordinate", o.Shared.String(), "rank", o.Rank),
		ingesting: make(map[key]bool), published: make(map[key]bool), badRemote: make(map[key]string), warned: make(map[key]bool),
		waits: make(map[ekey]WaitStatus), decided: make(map[ekey]bool), looked: make(map[ekey]time.Time)}
	s.mu.Lock()
	s.coord = c
	s.mu.Unlock()
	return c, nil
}

// PlanNext sets what the order server calls, in a goroutine, when its own
// mount accepts feedback of epoch e: plan epoch e+1, so that the decision
// is taken as soon as every part's feedback is in, whenever this node's
// trainer opens the epoch.
func (c *Coordinator) PlanNext(f func(epoch, parts int)) {
	c.mu.Lock()
	c.planNext = f
	c.mu.Unlock()
}

func (s *Store) coordinator() *Coordinator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coord
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *int64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	*r.n += int64(n)
	return n, err
}

// create writes name in the shared place, counting the bytes.
func (c *Coordinator) create(ctx context.Context, name string, r io.Reader, size int64) error {
	var n int64
	err := c.sh.Create(ctx, name, countingReader{r, &n}, size)
	c.mu.Lock()
	c.written += n
	c.mu.Unlock()
	return err
}

// readAll reads name from the shared place, at most limit bytes.
func (c *Coordinator) readAll(ctx context.Context, name string, limit int64) ([]byte, error) {
	rc, err := c.sh.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	c.mu.Lock()
	c.read += int64(len(b))
	c.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("read %s in %s: %w", name, c.sh, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s in %s: larger than the %d bytes it can hold", name, c.sh, limit)
	}
	return b, nil
}

// readDecision reads the decision of ek; an error matching
// fs.ErrNotExist when none was taken.
func (c *Coordinator) readDecision(ctx context.Context, ek ekey) (*Decision, error) {
	name := sharedDecisionName(ek.epoch, ek.parts)
	b, err := c.readAll(ctx, name, 1<<20)
	if err != nil {
		return nil, err
	}
	var d Decision
	if err := json.Unmarshal(b, &d); err != nil || d.Epoch != ek.epoch || d.Parts != ek.parts || !strings.HasPrefix(d.Digest, digestPrefix) || len(d.Digest) != len(digestPrefix)+64 {
		return nil, contentError{fmt.Errorf("%s in %s is not the decision of epoch %d of %d parts (%v): every node refuses to serve the epoch until it is replaced", name, c.sh, ek.epoch, ek.parts, err)}
	}
	c.mu.Lock()
	c.decided[ek] = true
	c.mu.Unlock()
	return &d, nil
}

// take publishes the decision of ek, once: an error matching fs.ErrExist
// when another node took it first.
func (c *Coordinator) take(ctx context.Context, ek ekey, balanced bool, reason string, orders [][]int32) (*Decision, error) {
	d := &Decision{Epoch: ek.epoch, Parts: ek.parts, Balanced: balanced, Reason: reason, Digest: Digest(orders), Rank: c.rank, Time: time.Now().UTC()}
	if balanced {
		d.Orders = sharedOrdersName(ek.epoch, ek.parts, d.Digest)
		b := EncodeOrders(orders)
		if err := c.create(ctx, d.Orders, bytes.NewReader(b), int64(len(b))); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("publish the orders of epoch %d: %w", ek.epoch, err)
		}
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if err := c.create(ctx, sharedDecisionName(ek.epoch, ek.parts), bytes.NewReader(b), int64(len(b))); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.decided[ek] = true
	c.mu.Unlock()
	c.log.Info("epoch decided", "epoch", ek.epoch, "parts", ek.parts, "balanced", balanced, "reason", reason, "digest", d.Digest)
	return d, nil
}

// follow returns the orders of decision d: saved, if their digest is the
// decision's; else the published orders, or the random reshuffle
// computed here.
func (c *Coordinator) follow(ctx context.Context, d *Decision, saved [][]int32, compute func(balanced bool) [][]int32) ([][]int32, bool, error) {
	mismatch := func(what, digest string) error {
		c.log.Error("orders differ from the epoch's decision: refusing to serve the epoch", "epoch", d.Epoch, "parts", d.Parts,
			"orders", what, "node_digest", digest, "decision_digest", d.Digest, "decided_by_rank", d.Rank,
			"decision", sharedDecisionName(d.Epoch, d.Parts), "shared", c.sh.String())
		return contentError{fmt.Errorf("epoch %d of %d parts: %s have digest %s, the decision in %s (by rank %d) has %s: refusing to serve orders the other nodes do not serve; "+
			"a node must not serve an epoch another way than the others (remove this node's cache directory, or use a fresh {coordinate} directory for a new run)",
			d.Epoch, d.Parts, what, digest, c.sh, d.Rank, d.Digest)}
	}
	if saved != nil {
		if dg := Digest(saved); dg != d.Digest {
			return nil, false, mismatch("the orders this node saved earlier", dg)
		}
		return saved, true, nil
	}
	if !d.Balanced {
		orders := compute(false)
		if dg := Digest(orders); dg != d.Digest {
			return nil, false, mismatch("the random reshuffle computed on this node", dg)
		}
		return orders, false, nil
	}
	b, err := c.readAll(ctx, d.Orders, 16+8*(c.Store.records+int64(d.Parts)))
	if err != nil {
		return nil, false, fmt.Errorf("the orders of epoch %d that the decision names: %w", d.Epoch, err)
	}
	sum := sha256.Sum256(b)
	if dg := digestPrefix + hex.EncodeToString(sum[:]); dg != d.Digest {
		return nil, false, mismatch("the orders file "+d.Orders, dg)
	}
	orders, err := decodeOrders(b, d.Parts, c.Store.records)
	if err != nil {
		return nil, false, contentError{fmt.Errorf("%s in %s: %w", d.Orders, c.sh, err)}
	}
	return orders, false, nil
}

// publishDigest publishes the digest of the orders this node serves for
// ek, once; a digest published earlier that differs refuses.
func (c *Coordinator) publishDigest(ctx context.Context, d *Decision, digest string) error {
	nd := NodeDigest{Epoch: d.Epoch, Parts: d.Parts, Rank: c.rank, Digest: digest, Balanced: d.Balanced, Time: time.Now().UTC()}
	b, _ := json.MarshalIndent(nd, "", "  ")
	b = append(b, '\n')
	name := sharedDigestName(d.Epoch, d.Parts, c.rank)
	err := c.create(ctx, name, bytes.NewReader(b), int64(len(b)))
	if errors.Is(err, fs.ErrExist) {
		var old NodeDigest
		ob, rerr := c.readAll(ctx, name, 1<<20)
		if rerr == nil {
			rerr = json.Unmarshal(ob, &old)
		}
		switch {
		case rerr != nil:
			err = fmt.Errorf("%s in %s: %w", name, c.sh, rerr)
		case old.Digest != digest:
			c.log.Error("this rank published other orders for the epoch earlier: refusing to serve the epoch", "epoch", d.Epoch, "parts", d.Parts,
				"node_digest", digest, "published_digest", old.Digest, "file", name)
			err = contentError{fmt.Errorf("epoch %d of %d parts: rank %d published digest %s in %s earlier, and would now serve %s: refusing (two nodes given the same {coordinate-rank}?)",
				d.Epoch, d.Parts, c.rank, old.Digest, name, digest)}
		default:
			err = nil
		}
	}
	c.mu.Lock()
	c.recent = append(c.recent, DecisionStatus{Epoch: d.Epoch, Parts: d.Parts, Balanced: d.Balanced, Reason: d.Reason, Digest: d.Digest, DecidedBy: d.Rank, Served: digest})
	if len(c.recent) > recentDecisions {
		c.recent = slices.Delete(c.recent, 0, len(c.recent)-recentDecisions)
	}
	c.mu.Unlock()
	return err
}

// Decide returns the orders of the parts of epoch (of parts) that every
// node of the job serves: those of the epoch's shared decision, taken here
// if no node took it yet. compute computes orders on this node: from the
// previous epoch's feedback of all parts in the store (balanced, asked of
// the order server only once every part is in), or the random reshuffle.
// served gives the served record ids of a part of the previous epoch, for
// the feedback the order server takes from the shared place. saved, when
// not nil, are the orders this node saved earlier: served if the decision
// has their digest (fromSaved), refused if not. A decision not taken
// within timeout is taken as the random reshuffle, by the first node to
// write it. An error means the node must not serve the epoch; ctx ending
// ends the wait with ctx's error.
func (c *Coordinator) Decide(ctx context.Context, epoch, parts int, timeout time.Duration, saved [][]int32,
	served func(part int) ([]int32, error), compute func(balanced bool) [][]int32) (orders [][]int32, balanced, fromSaved bool, err error) {
	ek := ekey{epoch, parts}
	start := time.Now()
	deadline := start.Add(timeout)
	c.forget(epoch - keptEpochs)
	defer func() {
		c.mu.Lock()
		delete(c.waits, ek)
		c.mu.Unlock()
	}()
	logged := false
	// transient is the latest error of the shared place: retried every
	// poll until twice the timeout, then the epoch is refused.
	var transient error
	for {
		if transient != nil {
			if time.Since(start) > 2*timeout {
				return nil, false, false, fmt.Errorf("epoch %d of %d parts: the shared place %s failed until twice {feedback-timeout}: %w", epoch, parts, c.sh, transient)
			}
			if !c.sleep(ctx, deadline.Add(timeout)) {
				return nil, false, false, ctx.Err()
			}
		}
		d, err := c.readDecision(ctx, ek)
		if err == nil {
			orders, fromSaved, err := c.follow(ctx, d, saved, compute)
			if err == nil {
				err = c.publishDigest(ctx, d, d.Digest)
			}
			if isTransient(err) {
				transient = c.noteTransient(err, transient)
				continue
			}
			if err != nil {
				return nil, false, false, err
			}
			if !fromSaved && d.Rank != c.rank {
				c.log.Info("following the epoch's decision", "epoch", epoch, "parts", parts, "balanced", d.Balanced, "decided_by_rank", d.Rank, "digest", d.Digest)
			}
			return orders, d.Balanced, fromSaved, nil
		}
		if isTransient(err) && !errors.Is(err, fs.ErrNotExist) {
			transient = c.noteTransient(err, transient)
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, false, false, err
		}
		transient = nil
		saved = nil // no decision: these were not shared, and are decided again
		c.publishPending(ctx, epoch-1, parts)
		w := WaitStatus{Epoch: epoch, Parts: parts, For: "decision", Since: start.UTC(), Deadline: deadline.UTC()}
		if c.rank == 0 {
			missing := c.gather(ctx, epoch-1, parts, served)
			if len(missing) == 0 {
				orders := compute(true)
				again, err := c.settle(ctx, ek, true, fmt.Sprintf("the feedback of all %d parts of epoch %d arrived", parts, epoch-1), orders, &transient)
				if again {
					continue // another node decided first (follow it), or the shared place failed for now
				}
				if err != nil {
					return nil, false, false, err
				}
				return orders, true, false, nil
			}
			w.For, w.MissingParts = "feedback", missing
		}
		c.mu.Lock()
		c.waits[ek] = w
		c.mu.Unlock()
		if !logged {
			c.log.Info("waiting for the epoch's "+w.For, "epoch", epoch, "parts", parts, "missing_parts", w.MissingParts, "timeout", timeout)
			logged = true
		}
		if !time.Now().Before(deadline) {
			reason := fmt.Sprintf("rank %d waited %s for the decision of the order server (rank 0)", c.rank, timeout)
			if w.For == "feedback" {
				reason = fmt.Sprintf("rank %d (the order server) waited %s for the feedback of parts %v of epoch %d", c.rank, timeout, w.MissingParts, epoch-1)
			}
			orders := compute(false)
			again, err := c.settle(ctx, ek, false, reason, orders, &transient)
			if again {
				continue
			}
			if err != nil {
				return nil, false, false, err
			}
			c.log.Warn("the epoch's feedback did not arrive in time: every node serves a random reshuffle", "epoch", epoch, "parts", parts, "reason", reason)
			return orders, false, false, nil
		}
		if !c.sleep(ctx, deadline) {
			return nil, false, false, ctx.Err()
		}
	}
}

// contentError is an error of the shared place's content (not of
// reaching it): the epoch is refused at once.
type contentError struct{ error }

func (e contentError) Unwrap() error { return e.error }

// isTransient reports whether err is a failure to reach the shared place,
// which a later try may not meet.
func isTransient(err error) bool {
	var c contentError
	return err != nil && !errors.As(err, &c) && !errors.Is(err, context.Canceled)
}

// noteTransient logs err when it is the first of a run of failures.
// settle writes the decision of ek with orders and publishes this node's
// digest of it. again says that the caller must look again: another node
// wrote the decision first (the caller then follows it), or the shared
// place failed for now (noted in *transient).
func (c *Coordinator) settle(ctx context.Context, ek ekey, balanced bool, reason string, orders [][]int32, transient *error) (again bool, err error) {
	d, err := c.take(ctx, ek, balanced, reason, orders)
	if errors.Is(err, fs.ErrExist) {
		return true, nil
	}
	if err == nil {
		err = c.publishDigest(ctx, d, d.Digest)
	}
	if isTransient(err) {
		*transient = c.noteTransient(err, *transient)
		return true, nil
	}
	return false, err
}

func (c *Coordinator) noteTransient(err, last error) error {
	if last == nil {
		c.log.Warn("the shared place failed; trying again", "err", err)
	}
	return err
}

// sleep waits one poll (less if until comes first), or until the store
// accepts an upload; false when ctx ends.
func (c *Coordinator) sleep(ctx context.Context, until time.Time) bool {
	c.Store.mu.Lock()
	changed := c.Store.changed
	c.Store.mu.Unlock()
	t := time.NewTimer(max(time.Millisecond, min(c.poll, time.Until(until))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-t.C:
	}
	return true
}

// forget drops what the coordinator remembers of epochs before epoch,
// so that its memory does not grow with the epochs.
func (c *Coordinator) forget(epoch int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.published {
		if k.epoch < epoch {
			delete(c.published, k)
		}
	}
	for k := range c.badRemote {
		if k.epoch < epoch {
			delete(c.badRemote, k)
		}
	}
	for k := range c.warned {
		if k.epoch < epoch {
			delete(c.warned, k)
		}
	}
	for k := range c.decided {
		if k.epoch < epoch {
			delete(c.decided, k)
		}
	}
}

// Complete reports whether epoch+1 of parts can be planned without
// waiting: its decision was taken, or this order server holds every part
// of epoch.
func (c *Coordinator) Complete(epoch, parts int) bool {
	if c.rank == 0 && c.Store.Complete(epoch, parts) {
		return true
	}
	ek := ekey{epoch + 1, parts}
	c.mu.Lock()
	done, last := c.decided[ek], c.looked[ek]
	c.mu.Unlock()
	if done {
		return true
	}
	if time.Since(last) < c.poll {
		return false
	}
	rc, err := c.sh.Open(context.Background(), sharedDecisionName(ek.epoch, ek.parts))
	if err == nil {
		rc.Close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.decided[ek] = true
		return true
	}
	if len(c.looked) > 64 {
		clear(c.looked)
	}
	c.looked[ek] = time.Now()
	return false
}
