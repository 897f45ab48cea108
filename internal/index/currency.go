package index

import (
	"context"
	"time"

	"github.com/kcp-dev/logicalcluster/v3"
)

// Defaults of the options that make the index know how current it is.
const (
	DefaultSampleInterval  = 2 * time.Second
	DefaultWatchTimeout    = 5 * time.Second
	DefaultAdmissionMemory = 10 * time.Minute
)

// Currency returns how current the index is for the dependents of src in
// cluster: a time C such that every dependent of src in cluster that kcp
// stored before C is in the index, with its state as of C or later. It is
// the currency of the shard that serves cluster (see store.Currency): the
// latest sample of the shard's resourceVersion (one every SampleInterval)
// that its reflector has passed. A reflector passes samples with the events
// of its resource, and, however quiet the resource, with the bookmark kcp
// sends before each watch times out (every WatchTimeout or so): C lags
// behind by about WatchTimeout plus SampleInterval at most.
//
// ok is false if the currency is not known: the source indexes nothing or
// is not Synced, the shard that serves cluster is not known, its reflector
// has not listed or its watch is broken, or it has passed no sample yet.
func (ix *Index) Currency(src Source, cluster logicalcluster.Name) (time.Time, bool) {
	w := ix.watch(src)
	if w == nil {
		return time.Time{}, false
	}
	shard, known := w.Serving(cluster)
	if !known {
		return time.Time{}, false
	}
	return shardCurrency(w, shard)
}

// Progressed reports whether the index holds every dependent of src in
// cluster that kcp stored at a resourceVersion of at most rv (a revision of
// the etcd of the shard that serves cluster, shared by all its objects):
// whether that shard's reflector has stored everything up to rv. It is
// false wherever Currency is not known.
func (ix *Index) Progressed(src Source, cluster logicalcluster.Name, rv uint64) bool {
	w := ix.watch(src)
	if w == nil || rv == 0 {
		return false
	}
	shard, known := w.Serving(cluster)
	if _, current := shardCurrency(w, shard); !known || !current {
		return false
	}
	stored, _, ok := w.Store().Progress(shard)
	return ok && stored >= rv
}

// shardCurrency returns the currency of the watch of a source on one shard
// (see Currency), if it is known.
func shardCurrency(w watch, shard string) (time.Time, bool) {
	if len(w.Paths()) == 0 || w.State().Phase != PhaseSynced || !w.ShardSynced(shard) {
		return time.Time{}, false
	}
	return w.Store().Currency(shard)
}

// leastCurrency returns the currency of the least current shard of a
// source (zero if that of some shard is not known), and the number of
// shards it was taken over: none for a source whose dependents are not
// indexed, that is neither Syncing nor Synced, or that is read on no
// shard.
func leastCurrency(w watch) (time.Time, int) {
	if len(w.Paths()) == 0 {
		return time.Time{}, 0
	}
	if phase := w.State().Phase; phase != PhaseSynced && phase != PhaseSyncing {
		return time.Time{}, 0
	}
	urls, _ := w.Shards("")
	var least time.Time
	for i, u := range urls {
		c, ok := shardCurrency(w, u)
		if !ok {
			return time.Time{}, len(urls)
		}
		if i == 0 || c.Before(least) {
			least = c
		}
	}
	return least, len(urls)
}

// Admitted returns when the index first saw the admission id (the value of
// the label depv1alpha1.LabelAdmission) on a dependent of src: in a list,
// or a watch event that added, changed or deleted it; or, for the id of a
// revision (store.RevisionID), the dependent change from that revision or
// go, or, for the id of a CREATE, the dependent at all. An id is remembered
// for AdmissionMemory after it was first seen (and at most 2^18 ids per
// source, the oldest forgotten first); a source whose paths changed keeps
// what it had seen.
func (ix *Index) Admitted(src Source, id string) (time.Time, bool) {
	w := ix.watch(src)
	if w == nil {
		return time.Time{}, false
	}
	return w.Store().Admitted(id)
}

// WaitAdmitted waits until the index has seen the admission id on a
// dependent of src (see Admitted), and returns when it first saw it; false
// if ctx ended first, id is not an admission id (16 hex digits), or the
// index does not watch src (or stops watching it). It follows the source's
// watch if it is replaced meanwhile (its paths changed).
func (ix *Index) WaitAdmitted(ctx context.Context, src Source, id string) (time.Time, bool) {
	var last *running
	for {
		ix.lock.Lock()
		r := ix.watches[src]
		ix.lock.Unlock()
		switch r {
		case nil:
			return time.Time{}, false
		case last:
			// It stopped, and was not replaced.
			return r.Store().Admitted(id)
		}
		last = r
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-r.done:
			case <-wctx.Done():
			}
			cancel()
		}()
		at, ok := r.Store().WaitAdmitted(wctx, id)
		cancel()
		if ok || ctx.Err() != nil {
			return at, ok
		}
	}
}
