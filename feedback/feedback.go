// Package feedback is the order server's memory: the vectors that trainers
// write back through the mount, one per served record (a per-example
// gradient or a sketch of it), checked and kept in the cache directory
// with the latest vector of every record in memory within a stated bound,
// and the orders that feedback strategies compute from them, persisted so
// that a remount serves the same epochs.
package feedback

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/corgifs/corgifs/internal/cachedir"
	"github.com/dustin/go-humanize"
)

// The file format of an upload: a HeaderSize-byte header (Magic, then the
// little-endian uint32s Version, the dimension d and a reserved zero),
// then one little-endian float32 vector of d per served record, in served
// order.
const (
	Magic      = "CGFB"
	Version    = 1
	HeaderSize = 16
)

// Bound is the memory that feedback of dimension dim for records records
// takes at most: records × d × 4 bytes of vectors, either the latest
// vector of every record (unless Options.EpochsOnly) or those of one epoch while a
// strategy computes the next epoch's orders from them (Store.Epoch
// returns them from disk, for the caller to drop when done), then 4 bytes
// a record for the epoch each latest vector came from and 8 for the served
// record ids of the two epochs kept. (A trainer that uploads one epoch
// with several part counts K adds 4 bytes a record for each.)
func Bound(records int64, dim int) int64 { return records * (4*int64(dim) + 12) }

// Options configure a Store.
type Options struct {
	// Dir is the directory the store keeps its files in (uploads, orders),
	// opened with cachedir.Open: a directory of the cache
	// directory that only this mount's dataset, strategy and seed use.
	Dir string
	// Root is the local source directory, which Dir must not be inside;
	// "" for a remote source.
	Root string
	// MaxBytes is the memory the store may hold (see Bound); 0 with Dim
	// set means Bound(Records, Dim).
	MaxBytes int64
	// Dim, when not 0, is the largest dimension accepted; else the largest
	// that MaxBytes holds. The first accepted upload fixes the dimension
	// of the mount.
	Dim     int
	Records int64 // records of the dataset
	// EpochsOnly keeps no latest vector of each record in memory: Latest
	// and LatestInto then find none, and the memory of Bound is left to
	// the vectors that Epoch returns. For strategies that read Epoch only
	// (grab, cdgrab; corgipile-balance reads the latest vectors).
	EpochsOnly bool
	Logger     *slog.Logger
}

// Store holds the feedback of one mount. Its methods are safe for
// concurrent use.
type Store struct {
	dir     *cachedir.Dir
	log     *slog.Logger
	records int64
	maxDim  int
	budget  int64
	keep    bool // !Options.EpochsOnly

	mu sync.Mutex
	// dim is fixed by the first accepted upload; 0 until then.
	dim int
	// latest holds the latest vector of every record (records × dim),
	// stamp the epoch+1 it came from (0: none). Both are allocated at the
	// first accepted upload.
	latest []float32
	stamp  []int32
	parts  map[key]*partState
	// refusals are the latest refusals, for status.json.
	refusals []Refusal
	// newest is the newest epoch with an accepted upload, -1 if none.
	newest int
	// changed is closed and replaced whenever an upload is accepted.
	changed chan struct{}
	stats   Stats
	// coord, when set, shares the epochs' decisions with other nodes
	// (coordinate.go).
	coord *Coordinator
}

type key struct{ epoch, part, parts int }

// partState is what the store knows of the uploads of one part of one epoch.
type partState struct {
	state   string // receiving, accepted or refused
	uid     uint32 // the writer of the latest upload
	records int    // served records
	dim     int
	bytes   int64
	reason  string
	at      time.Time
	ids     []int32 // served record ids, while the upload is kept
	file    string  // the accepted upload, while it is kept
}

const (
	stateReceiving = "receiving"
	stateAccepted  = "accepted"
	stateRefused   = "refused"
)

// Open opens the store's directory and checks that vectors of the
// dimension asked for fit in the budget.
func Open(o Options) (*Store, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Records < 0 || o.Dim < 0 || o.MaxBytes < 0 {
		return nil, fmt.Errorf("feedback: negative records, dimension or budget")
	}
	maxDim, budget := o.Dim, o.MaxBytes
	switch {
	case o.Dim > 0 && budget == 0:
		budget = Bound(o.Records, o.Dim)
	case o.Dim > 0:
		if need := Bound(o.Records, o.Dim); need > budget {
			return nil, fmt.Errorf("feedback vectors of dimension %d for %d records need %s (records × (4·d + 12) bytes = %d), more than the %s (%d bytes) left for them in {max-memory}: raise {max-memory} by %d bytes or lower the dimension",
				o.Dim, o.Records, humanize.IBytes(uint64(need)), need, humanize.IBytes(uint64(budget)), budget, need-budget)
		}
	case budget > 0:
		maxDim = int(min(int64(math.MaxInt32), (budget/max(1, o.Records)-12)/4))
	}
	if maxDim < 1 {
		return nil, fmt.Errorf("feedback: %s (%d bytes) of memory do not hold one dimension of feedback for %d records (%d bytes needed, records × 16): raise {max-memory}",
			humanize.IBytes(uint64(budget)), budget, o.Records, Bound(o.Records, 1))
	}
	if o.Dir == "" {
		return nil, errors.New("feedback: no cache directory to keep the uploads in (pass {cache-dir})")
	}
	dir, err := cachedir.Open(o.Dir, o.Root)
	if err != nil {
		return nil, fmt.Errorf("feedback: %w", err)
	}
	// Uploads last an epoch at most; one untouched for a day was left by a
	// mount that died.
	if err := dir.RemoveTemps(uploadPrefix, 24*time.Hour); err != nil {
		o.Logger.Warn("could not remove the uploads a previous mount left unfinished", "dir", dir.Path(), "err", err)
	}
	s := &Store{dir: dir, log: o.Logger, records: o.Records, maxDim: maxDim, budget: budget, keep: !o.EpochsOnly,
		parts: make(map[key]*partState), newest: -1, changed: make(chan struct{})}
	s.stats.MaxDim, s.stats.Records, s.stats.BytesReserved = maxDim, o.Records, Bound(o.Records, maxDim)
	return s, nil
}

// Close closes the store's directory. Uploads still open are dropped.
func (s *Store) Close() error { return s.dir.Close() }

// Dim returns the dimension of the mount's feedback, 0 until an upload
// was accepted.
func (s *Store) Dim() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dim
}

// MaxDim returns the largest dimension the store accepts.
func (s *Store) MaxDim() int { return s.maxDim }

// Latest returns a copy of the latest vector received for record id, nil
// if none was (or the store keeps none: Options.EpochsOnly).
func (s *Store) Latest(id int32) []float32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stamp == nil || id < 0 || int64(id) >= s.records || s.stamp[id] == 0 {
		return nil
	}
	v := make([]float32, s.dim)
	copy(v, s.latest[int(id)*s.dim:])
	return v
}

// LatestInto copies the latest vector of record id into dst, which must
// hold Dim values, without allocating; it returns the epoch the vector came
// from, or -1 (and leaves dst alone) if none was received.
func (s *Store) LatestInto(dst []float32, id int32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stamp == nil || id < 0 || int64(id) >= s.records || s.stamp[id] == 0 {
		return -1
	}
	copy(dst[:s.dim], s.latest[int(id)*s.dim:])
	return int(s.stamp[id]) - 1
}

// Epoch returns the upload accepted for part of parts in epoch: the served
// record ids and their vectors (len(ids) × dim values), as received, in
// served order. ok is false when none was accepted or it is no longer kept
// (only the two newest epochs are).
func (s *Store) Epoch(epoch, part, parts int) (ids []int32, vecs []float32, dim int, ok bool) {
	s.mu.Lock()
	p := s.parts[key{epoch, part, parts}]
	if p == nil || p.state != stateAccepted || p.file == "" {
		s.mu.Unlock()
		return nil, nil, 0, false
	}
	ids, name, dim := p.ids, p.file, p.dim
	s.mu.Unlock()
	ids, ok = s.servedIDs(ids, name)
	if !ok {
		s.log.Error("feedback: could not read back the served ids of an accepted upload", "epoch", epoch, "part", part, "parts", parts)
		return nil, nil, 0, false
	}
	vecs = make([]float32, len(ids)*dim)
	if err := s.readVectors(name, dim, len(ids), func(i int, v []float32) { copy(vecs[i*dim:], v) }); err != nil {
		s.log.Error("feedback: could not read back an accepted upload", "epoch", epoch, "part", part, "parts", parts, "err", err)
		return nil, nil, 0, false
	}
	return ids, vecs, dim, true
}

// Complete reports whether every part of epoch (of parts) was accepted.
func (s *Store) Complete(epoch, parts int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completeLocked(epoch, parts)
}

func (s *Store) completeLocked(epoch, parts int) bool {
	for i := range parts {
		if p := s.parts[key{epoch, i, parts}]; p == nil || p.state != stateAccepted {
			return false
		}
	}
	return true
}

// WaitEpoch waits until every part of epoch (of parts) was accepted, for
// at most timeout, and reports whether they were. It never waits longer,
// whatever the trainer does; it ends early, false, when ctx is done.
func (s *Store) WaitEpoch(ctx context.Context, epoch, parts int, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		done, changed := s.completeLocked(epoch, parts), s.changed
		s.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-changed:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// CountFallback counts an epoch served as a random reshuffle because its
// feedback did not arrive in time (stats.json).
func (s *Store) CountFallback() {
	s.mu.Lock()
	s.stats.Fallbacks++
	s.mu.Unlock()
}

// Stats are the store's counters, served as the "feedback" object of
// stats.json.
type Stats struct {
	Records       int64 `json:"records"`
	Dim           int   `json:"dim"`     // 0 until an upload is accepted
	MaxDim        int   `json:"max_dim"` // the largest the budget holds
	BytesReserved int64 `json:"bytes_reserved"`
	BytesHeld     int64 `json:"bytes_held"`
	Accepted      int64 `json:"accepted"`
	Refused       int64 `json:"refused"`
	Receiving     int   `json:"receiving"`
	// Fallbacks are the epochs served as a random reshuffle because their
	// feedback did not arrive within --feedback-timeout.
	Fallbacks int64 `json:"fallbacks"`
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Dim = s.dim
	st.BytesHeld = int64(len(s.latest))*4 + int64(len(s.stamp))*4
	for _, p := range s.parts {
		st.BytesHeld += int64(len(p.ids)) * 4
		if p.state == stateReceiving {
			st.Receiving++
		}
	}
	return st
}

// readVectors reads the n vectors of dimension dim of the upload file name
// and calls fn with each (a buffer reused between calls).
func (s *Store) readVectors(name string, dim, n int, fn func(i int, v []float32)) error {
	f, err := s.dir.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4*dim*max(1, min(n, (1<<20)/(4*dim))))
	v := make([]float32, dim)
	off := int64(HeaderSize)
	for i := 0; i < n; {
		k := min(n-i, len(buf)/(4*dim))
		b := buf[:4*dim*k]
		if _, err := f.ReadAt(b, off); err != nil {
			return fmt.Errorf("read %s at offset %d: %w", f.Name(), off, err)
		}
		off += int64(len(b))
		for ; k > 0; k-- {
			for j := range v {
				v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			}
			fn(i, v)
			b = b[4*dim:]
			i++
		}
	}
	return nil
}
