package store

import (
	"context"
	"strconv"
	"time"
)

// progress is how far the reflector of one shard has stored what it read:
// everything up to rv (a revision of the shard's etcd, which kcp uses as
// the resourceVersion of every object on the shard), last advanced at at.
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
// a bookmark (which only moves it forward). A version that is not a number
// stops the index from answering in place of a live read until the next one
// that is.
func (s *Store) setProgress(shard, resourceVersion string, list bool) {
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
	p.rv, p.at = rv, s.now()
	close(p.advanced)
	p.advanced = make(chan struct{})
}

// dropProgress forgets the progress of a shard whose reflector stopped.
func (s *Store) dropProgress(shard string) {
	s.plock.Lock()
	defer s.plock.Unlock()
	if p := s.progress[shard]; p != nil {
		close(p.advanced)
		delete(s.progress, shard)
	}
}

// Progress returns the resourceVersion up to which the reflector of shard
// has stored everything it read, and when it last stored something; ok is
// false while it has stored no complete list.
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
