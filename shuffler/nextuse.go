package shuffler

import (
	"sync"

	"github.com/corgifs/corgifs/diskcache"
)

// uses is the Planner's diskcache.NextUse: when each block is read next
// by the parts this mount serves. A part is served once a reader opened
// it (OpenStream); from then on its plans of every later epoch are known
// uses, since a trainer reads epoch after epoch. Positions are scaled so
// that each part spans an epoch from 0 to 1<<31: parts read at the same
// pace are at the same time at the same position.
type uses struct {
	mu     sync.Mutex
	served map[[2]int]bool  // {part, parts}
	epochs map[int][]uint32 // per epoch: 1 + position of each block, 0 if no served part reads it
}

// useHorizon is how many epochs past the current one Next looks at: a
// block no served part reads by then is as good as never read again.
const useHorizon = 2

// keptEpochs bounds the epochs whose positions are kept, 4 bytes a block each.
const keptEpochs = useHorizon + 2

// NextUse returns the planner's account of when each block is read next,
// for the disk cache's eviction (diskcache.Options.NextUse).
func (pl *Planner) NextUse() diskcache.NextUse { return nextUse{pl} }

type nextUse struct{ pl *Planner }

// serve records that a reader opened part of parts.
func (u *uses) serve(part, parts int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := [2]int{part, parts}
	if u.served[k] {
		return
	}
	if u.served == nil {
		u.served = map[[2]int]bool{}
	}
	u.served[k] = true
	u.epochs = nil // the new part's blocks are read too
}

// Next implements diskcache.NextUse.
func (n nextUse) Next(block int32, after int64) int64 {
	u := &n.pl.uses
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.served) == 0 {
		return diskcache.Never
	}
	e0 := max(0, int(after>>32))
	for e := e0; e <= e0+useHorizon; e++ {
		pos := n.positionsLocked(e)
		if int(block) >= len(pos) || pos[block] == 0 {
			continue
		}
		if t := diskcache.UseTime(e, pos[block]-1); t > after {
			return t
		}
	}
	return diskcache.Never
}

// positionsLocked returns 1 + the scaled position of every block in the
// served parts' plans of epoch e (0: not read). u.mu must be held.
func (n nextUse) positionsLocked(e int) []uint32 {
	u := &n.pl.uses
	if pos, ok := u.epochs[e]; ok {
		return pos
	}
	if u.epochs == nil {
		u.epochs = map[int][]uint32{}
	}
	for len(u.epochs) >= keptEpochs {
		// The epoch farthest from e goes: readers move forward.
		far := e
		for k := range u.epochs {
			if abs(k-e) > abs(far-e) {
				far = k
			}
		}
		delete(u.epochs, far)
	}
	pos := make([]uint32, len(n.pl.ix.Blocks))
	for k := range u.served {
		// A feedback strategy's epoch is planned once its feedback is
		// complete: asking earlier would wait, and fix the epoch to a
		// random reshuffle.
		if !n.pl.Ready(e, k[1]) {
			continue
		}
		p, err := n.pl.Plan(e, k[0], k[1])
		if err != nil {
			continue
		}
		var total int64
		for i := range p.Buffers {
			total += int64(len(p.Buffers[i].Blocks))
		}
		var at int64
		for i := range p.Buffers {
			for _, id := range p.Buffers[i].Blocks {
				v := uint32(at<<31/total) + 1
				if pos[id] == 0 || v < pos[id] {
					pos[id] = v
				}
				at++
			}
		}
	}
	u.epochs[e] = pos
	return pos
}

func abs(x int) int { return max(x, -x) }
