package feedback

// The exchange of feedback through the shared place: each node publishes
// the feedback its mount accepts, and the order server gathers every
// part's into its own store.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// accepted is called when the store accepts the upload of k: feedback
// this node's trainer wrote is published, for the order server.
func (c *Coordinator) accepted(k key) {
	c.mu.Lock()
	ingest, next := c.ingesting[k], c.planNext
	c.mu.Unlock()
	if ingest {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.publish(ctx, k); err != nil {
		// Tried again by every wait for the decision of the next epoch.
		c.log.Error("could not publish accepted feedback to the shared place; will retry while waiting for the next epoch's decision",
			"epoch", k.epoch, "part", k.part, "parts", k.parts, "err", err)
	}
	if c.rank == 0 && next != nil {
		go next(k.epoch+1, k.parts)
	}
}

// publish writes the accepted upload of k to the shared place, once.
func (c *Coordinator) publish(ctx context.Context, k key) error {
	c.mu.Lock()
	done := c.published[k]
	c.mu.Unlock()
	if done {
		return nil
	}
	c.Store.mu.Lock()
	file := ""
	if p := c.Store.parts[k]; p != nil && p.state == stateAccepted {
		file = p.file
	}
	c.Store.mu.Unlock()
	if file == "" {
		return fmt.Errorf("the accepted upload is no longer kept")
	}
	f, err := c.Store.dir.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	err = c.create(ctx, sharedFeedbackName(k.epoch, k.part, k.parts), f, st.Size())
	mine := err == nil
	if errors.Is(err, fs.ErrExist) {
		// Another node accepted the same part first: the first stays.
		err = nil
	}
	if err == nil {
		c.mu.Lock()
		c.published[k] = true
		if mine {
			c.ownParts++
		}
		c.mu.Unlock()
		c.log.Info("feedback published", "epoch", k.epoch, "part", k.part, "parts", k.parts)
	}
	return err
}

// publishPending publishes the parts of epoch this node accepted that are
// not out yet (a publish that failed at accept).
func (c *Coordinator) publishPending(ctx context.Context, epoch, parts int) {
	var todo []key
	c.Store.mu.Lock()
	for k, p := range c.Store.parts {
		if k.epoch == epoch && k.parts == parts && p.state == stateAccepted && p.file != "" {
			todo = append(todo, k)
		}
	}
	c.Store.mu.Unlock()
	c.mu.Lock()
	todo = slices.DeleteFunc(todo, func(k key) bool { return c.published[k] || c.ingesting[k] })
	c.mu.Unlock()
	for _, k := range todo {
		if err := c.publish(ctx, k); err != nil {
			c.log.Error("could not publish accepted feedback to the shared place", "epoch", k.epoch, "part", k.part, "parts", k.parts, "err", err)
		}
	}
}

// gather takes into the store the parts of epoch in the shared place that
// it lacks, and returns the parts still missing.
func (c *Coordinator) gather(ctx context.Context, epoch, parts int, served func(part int) ([]int32, error)) []int {
	var missing []int
	c.Store.mu.Lock()
	for i := range parts {
		if p := c.Store.parts[key{epoch, i, parts}]; p == nil || p.state != stateAccepted {
			missing = append(missing, i)
		}
	}
	c.Store.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	names, err := c.sh.List(ctx, fmt.Sprintf("epoch-%04d/feedback", epoch))
	if err != nil {
		c.log.Warn("cannot list the shared feedback", "epoch", epoch, "err", err)
		return missing
	}
	left := missing[:0]
	for _, i := range missing {
		k := key{epoch, i, parts}
		c.mu.Lock()
		_, bad := c.badRemote[k]
		c.mu.Unlock()
		name := sharedFeedbackName(epoch, i, parts)
		if bad || !slices.Contains(names, name[strings.LastIndexByte(name, '/')+1:]) {
			left = append(left, i)
			continue
		}
		if err := c.ingest(ctx, k, name, served); err != nil {
			left = append(left, i)
			if !errors.Is(err, ErrRefused) || errors.Is(err, ErrBusy) {
				// Reaching the file failed, or a local upload of the part
				// is open: tried again at the next poll.
				c.mu.Lock()
				warned := c.warned[k]
				c.warned[k] = true
				c.mu.Unlock()
				if !warned {
					c.log.Warn("could not take shared feedback; trying again", "file", name, "shared", c.sh.String(), "err", err)
				}
				continue
			}
			// The file is write-once: refused now, refused for ever.
			c.log.Error("shared feedback refused", "file", name, "shared", c.sh.String(), "err", err)
			c.mu.Lock()
			c.badRemote[k] = err.Error()
			c.mu.Unlock()
		}
	}
	return left
}

// ingest takes the shared feedback file name of k into the store, as if
// the part's trainer had written it through this mount.
func (c *Coordinator) ingest(ctx context.Context, k key, name string, served func(part int) ([]int32, error)) error {
	ids, err := served(k.part)
	if err != nil {
		return fmt.Errorf("no plan of the part the feedback is for: %w", err)
	}
	rc, err := c.sh.Open(ctx, name)
	if err != nil {
		return err
	}
	defer rc.Close()
	c.mu.Lock()
	c.ingesting[k] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.ingesting, k)
		c.mu.Unlock()
	}()
	u, err := c.Store.BeginBy(uint32(os.Getuid()), k.epoch, k.part, k.parts, ids)
	if errors.Is(err, ErrFinal) {
		return nil
	}
	if err != nil {
		return err
	}
	var n int64
	r := countingReader{rc, &n}
	buf := make([]byte, 1<<20)
	var off int64
	for {
		m, rerr := io.ReadFull(r, buf)
		if m > 0 {
			if _, err := u.WriteAt(buf[:m], off); err != nil {
				u.Close()
				return err
			}
			off += int64(m)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			u.Close()
			return fmt.Errorf("read %s at offset %d: %w", name, off, rerr)
		}
	}
	c.mu.Lock()
	c.read += n
	c.mu.Unlock()
	if err := u.Close(); err != nil {
		return err
	}
	c.mu.Lock()
	c.ingested++
	c.published[k] = true // taken from there: nothing to publish
	c.mu.Unlock()
	return nil
}
