package clearance

import (
	"slices"
	"sync"
	"time"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// scopedMax bounds the workspaces a pass lists one by one (see
// listing.scope); where more changed, it lists every workspace at once.
const scopedMax = 32

// listing is what a pass found when it listed one protected resource:
// enough to tell whether the next pass may leave it out, or list only some
// workspaces.
type listing struct {
	// generation is the index's generation when the listing began.
	generation uint64
	// fingerprint is the fingerprint the resource was cleared under.
	fingerprint string
	// due is, for each workspace with an object left out for its age
	// (created, or a reference recorded on it, less than MaxInFlight
	// before), the earliest time such an object becomes worth deciding.
	due map[logicalcluster.Name]time.Time
	// warm holds, for each workspace with an object left out for its age
	// whose decision is still to be prepared (see Clearer.warm), such an
	// object. Only the pass that lists uses it.
	warm map[logicalcluster.Name]kcp.Meta

	// lock guards again and againAll, which the workers set.
	lock sync.Mutex
	// again holds the workspaces in which an object may be clearable at
	// the next pass for a reason the index does not show: the decision
	// said not yet (the index not current past the object's horizon), or
	// a write failed or met a change. againAll is set when that may be
	// any workspace (the listing failed).
	again    map[logicalcluster.Name]struct{}
	againAll bool
}

func newListing(generation uint64, fingerprint string) *listing {
	return &listing{generation: generation, fingerprint: fingerprint, due: map[logicalcluster.Name]time.Time{},
		warm: map[logicalcluster.Name]kcp.Meta{}, again: map[logicalcluster.Name]struct{}{}}
}

// noteDue notes that an object of cluster left out for its age becomes
// worth deciding at due.
func (l *listing) noteDue(cluster logicalcluster.Name, due time.Time) {
	if d, ok := l.due[cluster]; !ok || due.Before(d) {
		l.due[cluster] = due
	}
}

// listAgain notes that cluster is to be listed again at the next pass
// (empty: every workspace).
func (l *listing) listAgain(cluster logicalcluster.Name) {
	l.lock.Lock()
	defer l.lock.Unlock()
	if cluster.Empty() {
		l.againAll = true
		return
	}
	l.again[cluster] = struct{}{}
}

// current reports whether the next pass may leave the resource out: the
// index has not changed since the listing, the fingerprint is the same, no
// object left out for its age is due, and nothing asked to list again.
// What a listing leaves out otherwise (an object being deleted, deferred,
// bypassed, referenced or cleared) changes only with a change the index
// counts (a dependent that came, changed or went; an object that came), or
// with a write of the object that a full pass finds.
func (l *listing) current(generation uint64, fingerprint string, now time.Time) bool {
	l.lock.Lock()
	defer l.lock.Unlock()
	return l.generation == generation && l.fingerprint == fingerprint && !l.againAll && len(l.again) == 0 && len(l.dueBy(now)) == 0
}

// dueBy returns the workspaces with an object left out for its age that is
// due by now.
func (l *listing) dueBy(now time.Time) []logicalcluster.Name {
	var out []logicalcluster.Name
	for cluster, due := range l.due {
		if !now.Before(due) {
			out = append(out, cluster)
		}
	}
	return out
}

// scope returns the workspaces that the next pass must list, if that is
// known and no more than scopedMax: those in which the index changed since
// the listing (changed, as Generations.ChangedClusters tells), those with
// an object left out for its age that is due, and those to list again.
// What changes whether an object may be cleared is in its own workspace:
// a dependent references objects of its own workspace, and an object
// that came is in its own. It returns false if every workspace is to be
// listed: the fingerprint changed, the listing failed, or the index does
// not know (or too many) workspaces that changed.
func (l *listing) scope(changed func(g uint64, most int) ([]logicalcluster.Name, bool), fingerprint string, now time.Time) ([]logicalcluster.Name, bool) {
	if l.fingerprint != fingerprint {
		return nil, false
	}
	l.lock.Lock()
	defer l.lock.Unlock()
	if l.againAll {
		return nil, false
	}
	clusters, ok := changed(l.generation, scopedMax)
	if !ok {
		return nil, false
	}
	for _, c := range l.dueBy(now) {
		if !slices.Contains(clusters, c) {
			clusters = append(clusters, c)
		}
	}
	for c := range l.again {
		if !slices.Contains(clusters, c) {
			clusters = append(clusters, c)
		}
	}
	if len(clusters) > scopedMax {
		return nil, false
	}
	slices.Sort(clusters)
	return clusters, true
}

// inherit carries over from the last listing what it knew of the
// workspaces this listing leaves out: their objects left out for their
// age, the decisions still to prepare, and whether to list them again.
func (l *listing) inherit(last *listing, listed []logicalcluster.Name) {
	for cluster, due := range last.due {
		if !slices.Contains(listed, cluster) {
			l.noteDue(cluster, due)
		}
	}
	for cluster, m := range last.warm {
		if !slices.Contains(listed, cluster) {
			l.warm[cluster] = m
		}
	}
	last.lock.Lock()
	defer last.lock.Unlock()
	for cluster := range last.again {
		if !slices.Contains(listed, cluster) {
			l.listAgain(cluster)
		}
	}
}
