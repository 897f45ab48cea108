package store

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"
)

// DefaultAdmissionMemory is how long a store remembers an admission id it
// has seen, unless told otherwise (see SetAdmissionMemory).
const DefaultAdmissionMemory = 10 * time.Minute

// maxAdmissions bounds the admission ids a store remembers: 2^18 ids take
// about 12 MB (a map entry of 16 bytes and a queue slot of 8 each, with the
// map's and the queue's spare room). At ten minutes' memory that is more
// than 400 admissions a second, or a relist of that many dependents that
// carry ids; beyond it, the ids seen first are forgotten first.
const maxAdmissions = 1 << 18

// admissions are the admission ids seen on dependents (see
// depv1alpha1.LabelAdmission): the 16 hex digits of an id as a number,
// and when each was first seen.
type admissions struct {
	lock   sync.Mutex
	memory time.Duration
	// first is when each id was first seen, in Unix nanoseconds.
	first map[uint64]int64
	// order holds the ids of first from head on, in the order they were
	// first seen, so that the oldest are forgotten first.
	order []uint64
	head  int
	// seen, if not nil, is closed when an id is first seen; WaitAdmitted
	// creates it, so that nobody pays for it when nobody waits.
	seen chan struct{}
}

// parseAdmission returns the number an admission id stands for: exactly 16
// hex digits. Anything else is not an id the webhook gives.
func parseAdmission(id string) (uint64, bool) {
	if len(id) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(id, 16, 64)
	return n, err == nil
}

// SetAdmissionMemory sets how long the store remembers an admission id it
// has seen (DefaultAdmissionMemory if d is not positive). Call it before
// the store is fed.
func (s *Store) SetAdmissionMemory(d time.Duration) {
	if d <= 0 {
		d = DefaultAdmissionMemory
	}
	s.admissions.lock.Lock()
	defer s.admissions.lock.Unlock()
	s.admissions.memory = d
}

// admitted records the admission ids of dependents the reflector of a
// shard stored (listed, added, updated or deleted), and the ids of the
// revisions it saw end (see RevisionID), as numbers; values of ids that
// are not ids are ignored. It is called after the dependents are stored,
// so that once Admitted reports an id, lookups see the dependent that
// carried it (or its deletion, or its revision after the one an id names).
func (s *Store) admitted(revisions []uint64, ids ...string) {
	for _, id := range ids {
		if n, ok := parseAdmission(id); ok {
			revisions = append(revisions, n)
		}
	}
	if len(revisions) == 0 {
		return
	}
	a := &s.admissions
	a.lock.Lock()
	defer a.lock.Unlock()
	now := s.now().UnixNano()
	a.forget(now)
	added := false
	for _, n := range revisions {
		if _, known := a.first[n]; known {
			continue
		}
		if len(a.first) >= maxAdmissions {
			delete(a.first, a.order[a.head])
			a.head++
		}
		a.first[n] = now
		a.order = append(a.order, n)
		added = true
	}
	if added && a.seen != nil {
		close(a.seen)
		a.seen = nil
	}
}

// forget forgets the ids first seen memory or longer before now. Callers
// hold the lock.
func (a *admissions) forget(now int64) {
	for a.head < len(a.order) {
		id := a.order[a.head]
		if now-a.first[id] < int64(a.memory) {
			break
		}
		delete(a.first, id)
		a.head++
	}
	if a.head >= 64 && 2*a.head >= len(a.order) {
		a.order = slices.Clone(a.order[a.head:])
		a.head = 0
	}
}

// lookup returns when id was first seen, if it is remembered. Callers hold
// the lock.
func (a *admissions) lookup(n uint64, now int64) (time.Time, bool) {
	at, ok := a.first[n]
	if !ok || now-at >= int64(a.memory) {
		return time.Time{}, false
	}
	return time.Unix(0, at), true
}

// Admitted returns when the store first saw the admission id on a
// dependent it stored, listed or saw deleted, if it saw it within the
// admission memory (see SetAdmissionMemory).
func (s *Store) Admitted(id string) (time.Time, bool) {
	n, ok := parseAdmission(id)
	if !ok {
		return time.Time{}, false
	}
	a := &s.admissions
	a.lock.Lock()
	defer a.lock.Unlock()
	now := s.now().UnixNano()
	a.forget(now)
	return a.lookup(n, now)
}

// WaitAdmitted waits until the store has seen the admission id on a
// dependent (see Admitted), and returns when it first saw it; false if ctx
// ended first, or id is not an admission id.
func (s *Store) WaitAdmitted(ctx context.Context, id string) (time.Time, bool) {
	n, ok := parseAdmission(id)
	if !ok {
		return time.Time{}, false
	}
	a := &s.admissions
	for {
		a.lock.Lock()
		if at, ok := a.lookup(n, s.now().UnixNano()); ok {
			a.lock.Unlock()
			return at, true
		}
		if a.seen == nil {
			a.seen = make(chan struct{})
		}
		seen := a.seen
		a.lock.Unlock()
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-seen:
		}
	}
}

// AdoptAdmissions makes the store remember the admission ids that from
// remembers, as first seen when from first saw them: a store that replaces
// another for the same source (its paths changed) keeps what the other
// has seen.
func (s *Store) AdoptAdmissions(from *Store) {
	if from == s {
		return
	}
	from.admissions.lock.Lock()
	ids := slices.Clone(from.admissions.order[from.admissions.head:])
	at := make([]int64, len(ids))
	for i, id := range ids {
		at[i] = from.admissions.first[id]
	}
	from.admissions.lock.Unlock()

	a := &s.admissions
	a.lock.Lock()
	defer a.lock.Unlock()
	for i, id := range ids {
		if _, known := a.first[id]; known || len(a.first) >= maxAdmissions {
			continue
		}
		a.first[id] = at[i]
		a.order = append(a.order, id)
	}
	if len(ids) > 0 && a.seen != nil {
		close(a.seen)
		a.seen = nil
	}
}
