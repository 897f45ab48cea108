package store

import (
	"strconv"
	"time"
)

// keptSamples is how many samples of each shard's resourceVersion the
// store keeps: at one every 2s, the last two minutes. A reflector further
// behind than that has no currency.
const keptSamples = 64

// sample is a resourceVersion of a shard: a consistent read sent at sentAt
// was served at rv, so every write on the shard that returned before
// sentAt has a resourceVersion of at most rv.
type sample struct {
	sentAt time.Time
	rv     uint64
}

// samples are the last keptSamples samples of a shard, in a ring.
type samples struct {
	ring [keptSamples]sample
	next int
}

// Sampled records a sample of shard's resourceVersion: a consistent LIST
// of the source's resource on the shard, sent at sentAt, was served at
// resourceVersion. A version that is not a number is ignored. A sample
// stays true, so one recorded after the shard was dropped does no harm;
// it is forgotten with the shard's progress.
func (s *Store) Sampled(shard string, sentAt time.Time, resourceVersion string) {
	rv, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil || rv == 0 {
		return
	}
	s.plock.Lock()
	defer s.plock.Unlock()
	ss := s.samples[shard]
	if ss == nil {
		ss = &samples{}
		s.samples[shard] = ss
	}
	ss.ring[ss.next] = sample{sentAt: sentAt, rv: rv}
	ss.next = (ss.next + 1) % keptSamples
}

// Currency returns the currency of shard: a time C such that every
// dependent stored on the shard before C is in the store, with its state
// as of C or later. It is the latest sample whose resourceVersion the
// reflector of the shard has passed (see Progress): kcp's resourceVersions
// are revisions of the shard's etcd and a watch delivers its resource's
// changes in revision order, so the store then holds every change up to
// the sample's version, which every write that returned before the sample
// was sent has at most. ok is false while the reflector has stored no
// complete list, or has passed no sample the store still keeps.
//
// It is only as good as the reflector: the caller checks that its watch
// is not broken (see sources.Watch.ShardSynced). A relist from an older
// version lowers the progress, and with it the currency.
func (s *Store) Currency(shard string) (time.Time, bool) {
	s.plock.Lock()
	defer s.plock.Unlock()
	p, ss := s.progress[shard], s.samples[shard]
	if p == nil || p.rv == 0 || ss == nil {
		return time.Time{}, false
	}
	var c time.Time
	for _, sm := range ss.ring {
		if sm.rv != 0 && sm.rv <= p.rv && sm.sentAt.After(c) {
			c = sm.sentAt
		}
	}
	return c, !c.IsZero()
}
