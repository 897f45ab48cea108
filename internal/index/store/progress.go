package store

import (
	"context"
	"strconv"
	"time"
)

// progress is how far the reflector of one shard has stored what it read:
// everything up to rv (a revision of the shard's etcd, which kcp uses as
// the resourceVersion of every object on the shard). at is when it last
// stored a complete list or an event: a bookmark moves rv, not at, so that
// at tells a busy watch from a quiet one.
type progress struct {
	rv uint64
	at time.Time
	// advanced is closed, and replaced, whenever rv changes or the shard
	// is dropped.
	advanced chan struct{}
}

// setProgress records that the reflector of shard has stored everything up
// to resourceVersion: the version of a complete list (exact, which may be
// lower than before after a relist from an older version) or of an event or
// a bookmark (which only moves it forward); stored is set for a list or an
// event, not for a bookmark. A version that is not a number stops the index
// from answering in place of a live read, and its currency from being
// known, until the next one that is.
func (s *Store) setProgress(shard, resourceVersion string, list, stored bool) {
	rv, err := strconv.ParseUint(resourceVersion, 10, 64)
	s.plock.Lock()
	defer s.plock.Unlock()
	p := s.progress[shard]
	if p == nil {
		p = &progress{advanced: make(chan struct{})}
		s.progress[shard] = p
	}
	switch {
	case err != nil:
		rv = 0
	case !list && rv < p.rv:
		return
	}
	p.rv = rv
	if stored {
		p.at = s.now()
	}
	close(p.advanced)
	p.advanced = make(chan struct{})
}

// lowerProgress lowers the progress of shard to resourceVersion if it is
// lower (or not a number), before a complete list at that version replaces
// the shard's objects: the progress never claims more than the store
// holds, even while a relist takes the store back to an older version.
func (s *Store) lowerProgress(shard, resourceVersion string) {
	rv, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		rv = 0
	}
	s.plock.Lock()
	defer s.plock.Unlock()
	if p := s.progress[shard]; p != nil && rv < p.rv {
		p.rv = rv
	}
}

// dropProgress forgets the progress and the samples of a shard whose
// reflector stopped.
func (s *Store) dropProgress(shard string) {
	s.plock.Lock()
	defer s.plock.Unlock()
	if p := s.progress[shard]; p != nil {
		close(p.advanced)
		delete(s.progress, shard)
	}
	delete(s.samples, shard)
}

// Progress returns the resourceVersion up to which the reflector of shard
// has stored everything it read, and when it last stored a list or an
// event (bookmarks aside); ok is false while it has stored no complete
// list.
func (s *Store) Progress(shard string) (rv uint64, at time.Time, ok bool) {
	s.plock.Lock()
	defer s.plock.Unlock()
	p := s.progress[shard]
	if p == nil || p.rv == 0 {
		return 0, time.Time{}, false
	}
	return p.rv, p.at, true
}

// WaitProgress waits until the reflector of shard has stored everything up
// to resourceVersion rv, and reports whether it did before ctx ended (or the
// shard was dropped). Once it returns true, lookups see the shard's objects
// as a consistent read at rv or later would.
func (s *Store) WaitProgress(ctx context.Context, shard string, rv uint64) bool {
	for {
		s.plock.Lock()
		p := s.progress[shard]
		if p == nil {
			s.plock.Unlock()
			return false
		}
		if p.rv >= rv {
			s.plock.Unlock()
			return true
		}
		advanced := p.advanced
		s.plock.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-advanced:
		}
	}
}
