package api

import (
	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/feedback"
	"github.com/corgifs/corgifs/shuffler"
)

// Stats is MNT/.corgifs/stats.json: the loader's counters and, beside them,
// the daemon-wide ones, so that leaks show from outside.
type Stats struct {
	blockcache.Stats
	BytesServed int64 `json:"bytes_served"`
	// BytesServedFromSlabs are the bytes of BytesServed that went to the
	// kernel as slices of the loaded blocks, without a copy in the daemon.
	BytesServedFromSlabs int64 `json:"bytes_served_from_slabs"`
	Goroutines           int   `json:"goroutines"`
	OpenFDs              int   `json:"open_fds"` // -1 where /proc/self/fd cannot be read
	// Inodes are the nodes the kernel has not forgotten (the root aside).
	Inodes int64 `json:"inodes"`
	// Source counts the requests of a remote source (fs.Config.SourceStats).
	Source any `json:"source,omitempty"`
	// Plans is the planner's work and memory, outside MemoryBudget.
	Plans shuffler.PlanStats `json:"plans"`
	// Feedback is the feedback store's, with a feedback strategy.
	Feedback *feedback.Stats `json:"feedback,omitempty"`
}
