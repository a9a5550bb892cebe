package diskcache

import (
	"cmp"
	"math"
	"slices"
)

// NextUse says when the blocks of an index are read next, from the plans
// of what a mount serves: corgifs knows every future order, so the disk
// cache can evict by Belady's rule, the entry read again farthest in the
// future first, where LRU would evict the one read longest ago. The upper
// layer (shuffler.Planner.NextUse) implements it; diskcache never looks
// at plans itself.
//
// Times are UseTime(epoch, pos): epochs first, then a position within the
// epoch, which the implementation scales so that the parts a mount serves,
// read at the same pace, are at the same position at the same time.
type NextUse interface {
	// Next returns the first time strictly after after at which block is
	// read, or Never if no plan known reads it again.
	Next(block int32, after int64) int64
}

// Never is the time NextUse gives a block no known plan reads again.
const Never int64 = math.MaxInt64

// UseTime returns the time of position pos within epoch.
func UseTime(epoch int, pos uint32) int64 { return int64(epoch)<<32 | int64(pos) }

// evictSlack is the share of the capacity a full cache with many entries
// frees at once beyond what a write needs, so that ranking every entry,
// which costs a NextUse call each, is paid once per many writes.
const (
	evictSlack      = 64
	evictSlackAfter = 1024
)

// candidate is an entry ranked for eviction.
type candidate struct {
	name diskName
	ent  *diskEntry
	next int64
}

// reserve takes size bytes of the capacity for a new entry holding block,
// loaded for epoch (size 0 at open: only bring the cache within its
// bound), evicting entries if it must: those read again farthest in the
// future (never first), ties and all when nothing is known going to the
// least recently used. It reports false, evicting nothing, when the new
// block is read again later than every victim it would displace: Belady's
// rule then keeps the entries.
//
// NextUse is asked without c.mu held: planning an epoch may take a while
// (or wait, for a feedback strategy), and disk-cache reads take c.mu.
// c.evict keeps other reservations out meanwhile.
func (c *Cache) reserve(block int32, epoch int, size int64) bool {
	c.evict.Lock()
	defer c.evict.Unlock()
	c.mu.Lock()
	need := c.held + size - c.max
	if need <= 0 {
		c.held += size
		c.mu.Unlock()
		return true
	}
	if len(c.entries) > evictSlackAfter {
		need += c.max / evictSlack
	}
	ranked := make([]candidate, 0, len(c.entries))
	for name, e := range c.entries {
		ranked = append(ranked, candidate{name: name, ent: e})
	}
	blocks := make([]int32, len(ranked))
	for i, r := range ranked {
		blocks[i] = r.ent.block
	}
	c.mu.Unlock()

	now := c.now(block, epoch)
	for i := range ranked {
		ranked[i].next = c.next(blocks[i], now)
	}
	own := c.next(block, now)

	c.mu.Lock()
	defer c.mu.Unlock()
	// Reads may have moved the entries' last uses meanwhile; ties go to
	// the least recently used as it is now.
	slices.SortFunc(ranked, func(a, b candidate) int {
		if a.next != b.next {
			return cmp.Compare(b.next, a.next) // farthest first
		}
		return cmp.Compare(a.ent.used, b.ent.used)
	})
	n, freed := 0, int64(0)
	for ; freed < need && n < len(ranked); n++ {
		if size > 0 && own > ranked[n].next {
			return false
		}
		if c.entries[ranked[n].name] == ranked[n].ent { // not dropped meanwhile
			freed += ranked[n].ent.size
		}
	}
	if freed < need && size > 0 {
		// The rest is taken by entries being written: evict nothing.
		return false
	}
	for _, v := range ranked[:n] {
		if c.entries[v.name] != v.ent {
			continue
		}
		delete(c.entries, v.name)
		c.held -= v.ent.size
		c.count.evictions.Add(1)
		if err := c.dir.Remove(v.name.String()); err != nil {
			c.log.Debug("disk cache: remove", "err", err)
		}
	}
	if size == 0 || c.held+size > c.max {
		return size == 0
	}
	c.held += size
	return true
}

// now returns the time of the load of block for epoch: its position in
// that epoch's plans, or the epoch's start if they do not read it.
func (c *Cache) now(block int32, epoch int) int64 {
	start := UseTime(epoch, 0)
	if c.nu == nil || block < 0 {
		return start
	}
	if t := c.nu.Next(block, start-1); t != Never && t>>32 == int64(epoch) {
		return t
	}
	return start
}

// next returns when block is read next after now; with no NextUse, 0 for
// all, so that the least recently used goes first.
func (c *Cache) next(block int32, now int64) int64 {
	switch {
	case c.nu == nil:
		return 0
	case block < 0:
		return Never
	}
	return c.nu.Next(block, now)
}

func sortByUsed(es []*diskEntry) {
	slices.SortFunc(es, func(a, b *diskEntry) int { return cmp.Compare(a.used, b.used) })
}
