package shuffler

import "fmt"

// Records returns the records part of parts serves in epoch, padding
// included, as Plan would give them; -1 when blocks of a probed index whose
// counts are not learned yet make it unknown. A feedback strategy's count
// does not depend on the order feedback gives, so this does not wait for
// feedback (as Size). It is what a trainer needs for its steps per epoch
// (the mount serves it as the part file's user.corgifs.records xattr).
func (pl *Planner) Records(epoch, part, parts int) (int64, error) {
	if !IsFeedback(pl.p.Strategy) {
		p, err := pl.Plan(epoch, part, parts)
		if err != nil {
			return 0, err
		}
		return p.Records, nil
	}
	if epoch < 0 || parts < 1 || part < 0 || part >= parts {
		return 0, fmt.Errorf("no part %d of %d in epoch %d", part, parts, epoch)
	}
	seq := pl.sequence(epoch, parts)
	p := pl.build(seq, epoch, part, parts)
	pl.cache.mu.Lock()
	pl.cache.releaseLocked(seq)
	pl.cache.mu.Unlock()
	return p.Records, nil
}
