package feedback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// The errors of Begin, WriteAt and Close match these with errors.Is, for
// the file system to map to errno values.
var (
	// ErrRefused: every refusal.
	ErrRefused = errors.New("feedback refused")
	// ErrTooLarge: the file goes past the bytes the budget allows.
	ErrTooLarge = errors.New("feedback file larger than the budget allows")
	// ErrClosed: the upload was closed (accepted or refused) already.
	ErrClosed = errors.New("feedback file already closed")
	// ErrBusy: another upload of the part is open.
	ErrBusy = errors.New("feedback of the part being written")
	// ErrFinal: the part's feedback was accepted already.
	ErrFinal = errors.New("feedback of the part accepted already")
)

// refusal is the error of a refusal: its message, and which of the errors
// above it is besides ErrRefused.
type refusal struct {
	msg  string
	kind error
}

func (r *refusal) Error() string { return r.msg }

func (r *refusal) Is(target error) bool {
	return target == ErrRefused || r.kind != nil && target == r.kind
}

// budgetReason starts the reasons of ErrTooLarge refusals.
const budgetReason = "more bytes than the budget allows"

// uploadPrefix starts the names of the files uploads are staged in.
const uploadPrefix = "upload"

// Upload is one feedback file being written. Writes may come in any sizes
// and any order of offsets (the kernel splits and reorders them); Close
// checks that the file holds exactly one vector per served record.
type Upload struct {
	s      *Store
	k      key
	uid    uint32 // the writer's, for status.json
	served []int32
	limit  int64 // the largest file the budget allows

	mu     sync.Mutex
	f      *os.File
	tmp    string
	spans  []span // bytes written, sorted and merged
	failed error  // the refusal of a write, which Close returns
	closed bool
	err    error // the result of Close
}

type span struct{ lo, hi int64 }

// Begin is BeginBy for a writer in this process (its uid).
func (s *Store) Begin(epoch, part, parts int, served []int32) (*Upload, error) {
	return s.BeginBy(uint32(os.Getuid()), epoch, part, parts, served)
}

// BeginBy starts the upload, by the user uid, of the feedback of part of
// parts in epoch, whose served records are served (record ids in served
// order; the store keeps the slice). It refuses a part that is unknown,
// being written or accepted already. status.json names uid with the
// part's state and each refusal.
func (s *Store) BeginBy(uid uint32, epoch, part, parts int, served []int32) (*Upload, error) {
	k := key{epoch, part, parts}
	if epoch < 0 || parts < 1 || part < 0 || part >= parts {
		return nil, s.refuseOther(k, uid, "unknown epoch or part: want epoch >= 0 and part < parts", nil)
	}
	for _, id := range served {
		if id < 0 || int64(id) >= s.records {
			return nil, s.refuse(k, uid, "", fmt.Sprintf("the plan serves record %d, which the dataset of %d records does not hold", id, s.records))
		}
	}
	s.mu.Lock()
	p := s.parts[k]
	var why string
	var kind error
	switch {
	case p == nil:
	case p.state == stateReceiving:
		why, kind = "another open file is writing this part's feedback; write each part once", ErrBusy
	case p.state == stateAccepted:
		why, kind = "this part's feedback was accepted already (at "+p.at.UTC().Format(time.RFC3339)+"); it is final, since orders may have been planned from it", ErrFinal
	}
	if why == "" && !s.makeRoomLocked(int64(len(served))) {
		why, kind = s.tooManyOpen(len(served)), ErrBusy
	}
	if why == "" {
		s.parts[k] = &partState{state: stateReceiving, uid: uid, records: len(served), at: time.Now(), ids: served}
	}
	if why != "" {
		defer s.mu.Unlock()
		return nil, s.noteLocked(k, uid, "", why, kind)
	}
	s.mu.Unlock()
	f, tmp, err := s.dir.CreateTemp(uploadPrefix)
	if err != nil {
		return nil, s.refuse(k, uid, "", fmt.Sprintf("cannot stage the upload in the cache directory: %v", err))
	}
	return &Upload{s: s, k: k, uid: uid, served: served, f: f, tmp: tmp,
		limit: HeaderSize + int64(len(served))*int64(s.maxDim)*4}, nil
}

// WriteAt writes p at offset off of the file. A write past the budget
// fails with ErrTooLarge and makes Close refuse the file; a write after
// Close fails with ErrClosed.
func (u *Upload) WriteAt(p []byte, off int64) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return 0, u.s.refuseOther(u.k, u.uid, fmt.Sprintf("write of %d bytes at offset %d after the file was closed; ignored", len(p), off), ErrClosed)
	}
	if u.failed != nil {
		return 0, u.failed
	}
	if off < 0 || off+int64(len(p)) > u.limit {
		// Refused at once, so that the status says why the write failed.
		u.failed = u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf(budgetReason+": a write of %d bytes at offset %d goes past %d bytes, the header and %d vectors of dimension %d (the largest dimension the budget holds)",
			len(p), off, u.limit, len(u.served), u.s.maxDim))
		return 0, u.failed
	}
	n, err := u.f.WriteAt(p, off)
	if n > 0 {
		u.spans = addSpan(u.spans, span{off, off + int64(n)})
	}
	if err != nil {
		u.failed = u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("cannot stage the upload in the cache directory: %v", err))
		return n, u.failed
	}
	return n, nil
}

// addSpan adds s to the sorted, merged spans.
func addSpan(spans []span, s span) []span {
	i, _ := slices.BinarySearchFunc(spans, s.lo, func(a span, lo int64) int {
		if a.hi < lo {
			return -1
		}
		return 1
	})
	j := i
	for j < len(spans) && spans[j].lo <= s.hi {
		s.lo, s.hi = min(s.lo, spans[j].lo), max(s.hi, spans[j].hi)
		j++
	}
	return slices.Replace(spans, i, j, s)
}

// Close checks the file and accepts it, or refuses it: the error says why,
// and so do the log and the status. Later calls return the same result.
func (u *Upload) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return u.err
	}
	u.closed = true
	u.err = u.closeLocked()
	u.f.Close()
	u.s.dir.Remove(u.tmp)
	if c := u.s.coordinator(); c != nil && u.err == nil {
		// Published before close(2) returns: a trainer whose close
		// succeeded has its feedback in the shared place.
		c.accepted(u.k)
	}
	return u.err
}

func (u *Upload) closeLocked() error {
	var size int64
	if len(u.spans) > 0 {
		size = u.spans[len(u.spans)-1].hi
	}
	n := int64(len(u.served))
	if u.failed != nil {
		return u.failed
	}
	if size < HeaderSize || u.spans[0].lo > 0 || u.spans[0].hi < HeaderSize {
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("no header: the file must start with the %d-byte header (%q, version, dimension, 0); %d bytes arrived", HeaderSize, Magic, size))
	}
	var h [HeaderSize]byte
	if _, err := u.f.ReadAt(h[:], 0); err != nil {
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("cannot read the staged upload back: %v", err))
	}
	magic, version, dim, reserved := string(h[:4]), binary.LittleEndian.Uint32(h[4:]), binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
	switch {
	case magic != Magic:
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("wrong magic %q: a feedback file starts with %q", magic, Magic))
	case version != Version:
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("wrong version %d: this corgifs reads version %d", version, Version))
	case reserved != 0:
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("the reserved header field (bytes 12-15) is %d, not 0", reserved))
	case dim == 0:
		return u.s.refuse(u.k, u.uid, u.tmp, "wrong dimension 0")
	case int64(dim) > int64(u.s.maxDim):
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf(budgetReason+": dimension %d; the memory for feedback holds at most dimension %d for %d records", dim, u.s.maxDim, u.s.records))
	}
	d := int(dim)
	if fixed := u.s.Dim(); fixed != 0 && d != fixed {
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("wrong dimension %d: this mount's feedback has dimension %d (fixed by the first accepted file)", d, fixed))
	}
	body, vec := size-HeaderSize, int64(4*d)
	switch {
	case body%vec != 0:
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("%d bytes after the header are not a whole number of %d-byte vectors (dimension %d); the part served %d records", body, vec, d, n))
	case body/vec < n:
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("too few vectors: %d of dimension %d for the %d records the part served", body/vec, d, n))
	case body/vec > n:
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("too many vectors: %d of dimension %d for the %d records the part served", body/vec, d, n))
	case len(u.spans) > 1:
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("bytes %d to %d were never written", u.spans[0].hi, u.spans[1].lo))
	}
	// The vectors are checked before any is taken: a refused file leaves
	// the latest vectors as they were.
	bad := ""
	if err := u.s.readVectors(u.tmp, d, int(n), func(i int, v []float32) {
		if bad != "" {
			return
		}
		for j, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				bad = fmt.Sprintf("vector %d (record %d) holds %v at position %d; vectors must be finite", i, u.served[i], x, j)
				return
			}
		}
	}); err != nil {
		return u.s.refuse(u.k, u.uid, u.tmp, fmt.Sprintf("cannot read the staged upload back: %v", err))
	}
	if bad != "" {
		return u.s.refuse(u.k, u.uid, u.tmp, bad)
	}
	return u.s.accept(u, d)
}

// accept takes the vectors of an upload checked by closeLocked and keeps
// its file.
func (s *Store) accept(u *Upload, d int) error {
	name := fmt.Sprintf("epoch-%04d-part-%05d-of-%05d.f32", u.k.epoch, u.k.part, u.k.parts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dim == 0 {
		s.dim = d
		if s.keep {
			s.latest = make([]float32, s.records*int64(d))
			s.stamp = make([]int32, s.records)
		}
	} else if s.dim != d {
		// Another upload of another dimension was accepted meanwhile.
		return s.refuseLocked(u.k, u.uid, u.tmp, fmt.Sprintf("wrong dimension %d: this mount's feedback has dimension %d (fixed by the first accepted file)", d, s.dim))
	}
	if s.keep {
		stamp := int32(min(u.k.epoch+1, math.MaxInt32))
		if err := s.readVectors(u.tmp, d, len(u.served), func(i int, v []float32) {
			id := u.served[i]
			if s.stamp[id] <= stamp {
				copy(s.latest[int(id)*d:], v)
				s.stamp[id] = stamp
			}
		}); err != nil {
			return s.refuseLocked(u.k, u.uid, u.tmp, fmt.Sprintf("cannot read the staged upload back: %v", err))
		}
	}
	if err := s.SaveOrder(servedName(name), u.served); err != nil {
		return s.refuseLocked(u.k, u.uid, u.tmp, fmt.Sprintf("cannot keep the upload's served ids in the cache directory: %v", err))
	}
	if err := s.dir.Rename(u.tmp, name); err != nil {
		return s.refuseLocked(u.k, u.uid, u.tmp, fmt.Sprintf("cannot keep the upload in the cache directory: %v", err))
	}
	p := s.parts[u.k]
	if p == nil { // the part was pruned meanwhile
		p = &partState{}
		s.parts[u.k] = p
	}
	*p = partState{state: stateAccepted, uid: u.uid, records: len(u.served), dim: d, bytes: HeaderSize + int64(len(u.served))*int64(4*d),
		at: time.Now(), ids: u.served, file: name}
	// Its ids were counted since Begin; others make room if they must.
	p.ids = nil
	if s.makeRoomLocked(int64(len(u.served))) {
		p.ids = u.served
	}
	s.stats.Accepted++
	s.log.Info("feedback accepted", "uid", u.uid, "epoch", u.k.epoch, "part", u.k.part, "parts", u.k.parts, "records", len(u.served), "dim", d)
	if u.k.epoch > s.newest {
		s.newest = u.k.epoch
		s.pruneLocked()
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// keptEpochs are the epochs whose uploads are kept (the newest ones with
// an accepted upload); statusEpochs those that status.json shows.
const (
	keptEpochs   = 2
	statusEpochs = 16
)

// pruneLocked drops the files and ids of epochs older than keptEpochs,
// and forgets epochs older than statusEpochs.
func (s *Store) pruneLocked() {
	for k, p := range s.parts {
		if k.epoch > s.newest-keptEpochs || p.state == stateReceiving {
			continue
		}
		if p.file != "" {
			if err := s.dir.Remove(p.file); err != nil {
				s.log.Warn("feedback: could not remove an old upload", "err", err)
			}
			if f, err := orderName(servedName(p.file)); err == nil {
				if err := s.dir.Remove(f); err != nil {
					s.log.Warn("feedback: could not remove the served ids of an old upload", "err", err)
				}
			}
			p.file, p.ids = "", nil
		}
		if k.epoch <= s.newest-statusEpochs {
			delete(s.parts, k)
		}
	}
}

// Refusal is a refused upload or write, for status.json.
type Refusal struct {
	// UID is the user whose open or write was refused.
	UID    uint32    `json:"uid"`
	Epoch  int       `json:"epoch"`
	Part   int       `json:"part"`
	Parts  int       `json:"parts"`
	Name   string    `json:"name,omitempty"`
	Reason string    `json:"reason"`
	Time   time.Time `json:"time"`
}

// maxRefusals bounds the refusals status.json lists.
const maxRefusals = 64

// Refuse is RefuseBy for a writer in this process (its uid).
func (s *Store) Refuse(epoch, part, parts int, name, reason string) error {
	return s.RefuseBy(uint32(os.Getuid()), epoch, part, parts, name, reason)
}

// RefuseBy records a refusal that the file system decided (a name that is
// no part, an open that cannot write a feedback file, a user who may not
// write feedback) for the user uid, logs it and returns it as an error.
// epoch, part and parts are -1 where the name holds none.
func (s *Store) RefuseBy(uid uint32, epoch, part, parts int, name, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noteLocked(key{epoch, part, parts}, uid, name, reason, nil)
}

// refuse refuses the upload of k by uid, whose staged file is tmp.
func (s *Store) refuse(k key, uid uint32, tmp, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refuseLocked(k, uid, tmp, reason)
}

func (s *Store) refuseLocked(k key, uid uint32, tmp, reason string) error {
	p := s.parts[k]
	if p == nil {
		p = &partState{}
		s.parts[k] = p
	}
	if p.state != stateAccepted {
		*p = partState{state: stateRefused, uid: uid, records: p.records, reason: reason, at: time.Now()}
		s.forgetRefusedLocked()
	}
	var kind error
	if strings.HasPrefix(reason, budgetReason) {
		kind = ErrTooLarge
	}
	return s.noteLocked(k, uid, "", reason, kind)
}

// forgetRefusedLocked keeps at most maxRefusals refused parts, forgetting
// the oldest, so that uploads refused for ever new names cannot grow the
// store (the refusals list keeps their reasons).
func (s *Store) forgetRefusedLocked() {
	var n int
	var oldest key
	var at time.Time
	for k, p := range s.parts {
		if p.state != stateRefused {
			continue
		}
		n++
		if at.IsZero() || p.at.Before(at) {
			oldest, at = k, p.at
		}
	}
	if n > maxRefusals {
		delete(s.parts, oldest)
	}
}

// refuseOther records a refusal that leaves the part's state alone (a
// second writer, a write after close).
func (s *Store) refuseOther(k key, uid uint32, reason string, kind error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noteLocked(k, uid, "", reason, kind)
}

func (s *Store) noteLocked(k key, uid uint32, name, reason string, kind error) error {
	s.stats.Refused++
	r := Refusal{UID: uid, Epoch: k.epoch, Part: k.part, Parts: k.parts, Name: name, Reason: reason, Time: time.Now().UTC()}
	if len(s.refusals) == maxRefusals {
		s.refusals = slices.Delete(s.refusals, 0, 1)
	}
	s.refusals = append(s.refusals, r)
	s.log.Warn("feedback refused", "uid", uid, "epoch", k.epoch, "part", k.part, "parts", k.parts, "name", name, "reason", reason)
	msg := fmt.Sprintf("feedback for epoch %d part %d of %d refused: %s", k.epoch, k.part, k.parts, reason)
	if name != "" {
		msg = fmt.Sprintf("feedback file %s refused: %s", name, reason)
	}
	return &refusal{msg: msg, kind: kind}
}
