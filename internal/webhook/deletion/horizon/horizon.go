// Package horizon decides, for a DELETE of a protected object, what the
// object's own state and an index that knows how current it is say about
// the dependents that may reference it (see package inflight and
// docs/architecture.md, "Admitted references"): which references recorded
// on the object may still be in flight, waiting a moment for them to land,
// and whether the index holds every dependent that can reference the
// object, so that the DELETE needs no read.
package horizon

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/buger/jsonparser"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
)

// Currency tells how current the index is and which admissions it has
// seen; *index.Index implements it.
type Currency interface {
	// Currency returns a time before which every dependent of src in
	// cluster that kcp stored is in the index (see index.Index.Currency).
	Currency(src index.Source, cluster logicalcluster.Name) (time.Time, bool)
	// Admitted tells when the index first saw a dependent of src carrying
	// the admission id.
	Admitted(src index.Source, id string) (time.Time, bool)
	// WaitAdmitted waits until the index has seen the admission id on a
	// dependent of src, or ctx ends.
	WaitAdmitted(ctx context.Context, src index.Source, id string) (time.Time, bool)
	// Dependent returns the virtual workspace URL of src on the shard of
	// cluster, and a dependent the index holds there.
	Dependent(src index.Source, cluster logicalcluster.Name) (string, kcp.Meta, bool)
	// ServingURL returns the URL of the virtual workspace of src on the
	// shard known to serve cluster.
	ServingURL(src index.Source, cluster logicalcluster.Name) (string, bool)
	// Progressed reports whether the index holds every dependent of src in
	// cluster that kcp stored at a resourceVersion of at most rv (see
	// index.Index.Progressed).
	Progressed(src index.Source, cluster logicalcluster.Name, rv uint64) bool
}

// Activation tells since when an admission webhook is in effect on a
// shard; *tracking.Tracker implements it.
type Activation interface {
	Since(ctx context.Context, key tracking.Key, obj tracking.Object) (time.Time, bool)
}

// InFlightWait bounds how long a DELETE waits for references in flight to
// land: a dependent whose admission recorded its reference is stored
// moments later, unless another webhook holds it up.
const InFlightWait = 2 * time.Second

// Object is what the object being deleted says about its references: its
// ledger, as the DELETE's admission sees it (the state the DELETE commits
// against), and when it was created.
type Object struct {
	Ledger  inflight.Ledger
	Created time.Time
	// Malformed is set when the ledger did not parse: nothing is decided
	// from it.
	Malformed bool
}

// Read reads the ledger and the creation time of an object from its JSON.
func Read(raw []byte) Object {
	var o Object
	var err error
	if o.Ledger, err = inflight.LedgerOf(raw); err != nil {
		o.Malformed = true
	}
	if ts, err := jsonparser.GetString(raw, "metadata", "creationTimestamp"); err == nil {
		if t, err := time.Parse(time.RFC3339, ts); err == nil {
			o.Created = t
		}
	}
	return o
}

// Group is a dependent type that can reference the object, as the DELETE
// groups the rules that protect it.
type Group struct {
	Source index.Source
	// Synced is set when the index has listed the type on every shard and
	// its watch is not broken.
	Synced bool
	// Scheme is the fingerprint of the scheme under which the dependents
	// are labelled, empty if they are not.
	Scheme string
	// Checked are, for a type whose dependents cannot be labelled, the
	// references at which the dependents may reference the object: the
	// check of new references records them (see package tracking,
	// KindCheck). Empty for a type whose dependents can be labelled.
	Checked []fieldpath.Reference
	// Tracked is set when every rule of the group reports its references
	// tracked, since TrackedSince.
	Tracked      bool
	TrackedSince time.Time
}

// Leases ends the leases that a DELETE finds on its object (see
// inflight.Lease); *inflight.Writer implements it.
type Leases interface {
	// Resolve waits until the leases have ended and returns the object as
	// it then is (nil if it is gone).
	Resolve(ctx context.Context, t inflight.Target, leases []inflight.Lease) ([]byte, error)
}

// Judge answers the questions of a DELETE about the object's horizon.
type Judge struct {
	Currency   Currency
	Activation Activation
	Leases     Leases
}

// Unleased returns the metadata and the state of the object of a DELETE of
// target (named by obj) whose ledger carries leases as it is once they have
// ended, and true; or false,
// if that could not be read (the leases then count as floors), or the
// object is gone or another object of the name. The DELETE commits against
// the state it was admitted on, so an answer for the newer state is one
// for the DELETE: if the object changed, kcp admits it again on the new
// state.
func (j *Judge) Unleased(ctx context.Context, target index.Source, obj kcp.Meta, o Object) (kcp.Meta, Object, bool) {
	if j.Leases == nil || len(o.Ledger.Leases) == 0 {
		return obj, o, false
	}
	raw, err := j.Leases.Resolve(ctx, inflight.Target{Source: target, Cluster: obj.Cluster, Namespace: obj.Namespace, Name: obj.Name}, o.Ledger.Leases)
	if err != nil || raw == nil {
		return obj, o, false
	}
	meta, err := kcp.ReadMeta(raw)
	if err != nil || meta.UID != obj.UID {
		return obj, o, false
	}
	meta.Cluster = obj.Cluster
	return meta, Read(raw), true
}

// Landed tells whether the index has seen an admission id on a dependent of
// any of the groups.
func (j *Judge) Landed(groups []Group) inflight.Landed {
	return func(id string) (time.Time, bool) {
		for _, g := range groups {
			if t, ok := j.Currency.Admitted(g.Source, id); ok {
				return t, true
			}
		}
		return time.Time{}, false
	}
}

// WaitLanded waits, at most InFlightWait and until ctx ends, until the
// index has seen every mark on a dependent of one of the groups.
func (j *Judge) WaitLanded(ctx context.Context, groups []Group, marks []inflight.Mark) {
	ctx, stop := context.WithTimeout(ctx, InFlightWait)
	defer stop()
	var wg sync.WaitGroup
	for _, m := range marks {
		wg.Go(func() {
			mctx, done := context.WithCancel(ctx)
			defer done()
			var once sync.Once
			var inner sync.WaitGroup
			for _, g := range groups {
				inner.Go(func() {
					if _, ok := j.Currency.WaitAdmitted(mctx, g.Source, m.ID); ok {
						once.Do(done)
					}
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
}

// How tells how Current found the index current enough.
type How string

const (
	// NotCurrent means the DELETE needs a read (Current says why).
	NotCurrent How = ""
	// PastHorizon means the index is current past the object's horizon.
	PastHorizon How = "horizon"
	// PastRevision means the index has stored everything up to the object's own
	// revision, and is current past what its ledger records; only where
	// Current was asked to (a deferred deletion).
	PastRevision How = "revision"
)

// Current reports whether the index holds every dependent that can
// reference the object (of target, named in obj), so that the DELETE needs
// no read: for every group, the rules track its references
// (ReferencesTracked, since some time), the labelling webhook of the
// dependents with their current scheme (for a type whose dependents cannot
// be labelled, the check of new references for the group's references) and
// the guard of the object's ledger are in effect on the shard (see package
// tracking), and the index
// is current past the latest of the ledger's horizon and MaxInFlight after
// each of those began. References recorded before any of them may have
// landed up to MaxInFlight later; the index holds them once it is current
// past that. If not, it says why.
//
// With byRevision, a group whose index is not current past the horizon
// counts too if it is current past what the ledger records (the horizon
// without the object's creation, a.Recorded) and the activations above,
// and has stored every dependent up to the object's own resourceVersion:
// the revision of its last write, which the DELETE commits against. Every
// dependent admitted while the object existed recorded its reference on
// it before it was stored (a.Recorded covers those), and every dependent
// stored before that revision is in the index. What remains is a dependent
// admitted while the object did not exist yet (a reference to a missing
// object) and stored after the object's last write, so in flight across
// both; see docs/architecture.md, "Deferred deletion (replay)".
func (j *Judge) Current(ctx context.Context, target index.Source, obj kcp.Meta, groups []Group, a inflight.Assessment, byRevision bool) (How, string) {
	if j.Currency == nil || j.Activation == nil || len(groups) == 0 {
		return NotCurrent, "no horizon"
	}
	if a.Horizon.IsZero() {
		return NotCurrent, "the object has no creation time"
	}
	horizon, recorded := a.Horizon, a.Recorded
	later := func(t time.Time) {
		t = t.Add(inflight.MaxInFlight)
		horizon, recorded = inflight.Later(horizon, t), inflight.Later(recorded, t)
	}
	guard, why := j.guardSince(ctx, target, obj)
	if why != "" {
		return NotCurrent, why
	}
	later(guard)
	for _, g := range groups {
		switch {
		case !g.Synced:
			return NotCurrent, fmt.Sprintf("%s is not synced", g.Source)
		case g.Scheme == "" && len(g.Checked) == 0:
			return NotCurrent, fmt.Sprintf("%s is not labelled", g.Source)
		case !g.Tracked:
			return NotCurrent, fmt.Sprintf("the rules of %s do not report ReferencesTracked=True", g.Source)
		}
		later(g.TrackedSince)
		url, probe, ok := j.Currency.Dependent(g.Source, obj.Cluster)
		if !ok {
			return NotCurrent, fmt.Sprintf("no dependent of %s on the shard to probe with", g.Source)
		}
		// What records the references: the labelling webhook, or the check
		// of new references for a type that cannot be labelled.
		webhook, key := "the labelling webhook", tracking.Key{Kind: tracking.KindLabelling, Source: g.Source, Shard: url, Scheme: g.Scheme}
		with := tracking.Object{Cluster: probe.Cluster, Namespace: probe.Namespace, Name: probe.Name}
		if g.Scheme == "" {
			webhook, key.Kind, key.Scheme, with.References = "the check of new references", tracking.KindCheck, tracking.CheckScheme(g.Checked), g.Checked
		}
		recording, ok := j.Activation.Since(ctx, key, with)
		if !ok {
			return NotCurrent, fmt.Sprintf("%s of %s is not known to be in effect on the shard", webhook, g.Source)
		}
		later(recording)
	}
	rv, _ := strconv.ParseUint(obj.ResourceVersion, 10, 64)
	how := PastHorizon
	for _, g := range groups {
		c, ok := j.Currency.Currency(g.Source, obj.Cluster)
		switch {
		case !ok:
			return NotCurrent, fmt.Sprintf("the index of %s does not know how current it is", g.Source)
		case !c.Before(horizon):
			// Current past the horizon.
		case byRevision && !c.Before(recorded) && j.Currency.Progressed(g.Source, obj.Cluster, rv):
			how = PastRevision
		default:
			return NotCurrent, fmt.Sprintf("the index of %s is current until %s, before the horizon %s", g.Source, c.UTC().Format(time.RFC3339), horizon.UTC().Format(time.RFC3339))
		}
	}
	return how, ""
}

// guardSince returns since when the guard of the ledger of obj (an object
// of target) has been in effect on the shard of its workspace, probing
// with obj in the background while that is not known (see
// tracking.Tracker.Since), or why it is not known.
func (j *Judge) guardSince(ctx context.Context, target index.Source, obj kcp.Meta) (time.Time, string) {
	shard, known := j.Currency.ServingURL(target, obj.Cluster)
	if !known {
		return time.Time{}, "the shard of the workspace is not known yet"
	}
	since, ok := j.Activation.Since(ctx, tracking.Key{Kind: tracking.KindGuard, Source: target, Shard: shard},
		tracking.Object{Cluster: obj.Cluster, Namespace: obj.Namespace, Name: obj.Name})
	if !ok {
		return time.Time{}, "the guard of the ledger is not known to be in effect on the shard"
	}
	return since, ""
}

// Warm starts, unless it is known, recent or under way, the probe that
// tells since when the guard of the ledger of obj (an object of target) is
// in effect on its shard, and reports whether that is known. Every horizon
// on the shard begins MaxInFlight after that (see Current), so a caller
// that sees an object before its DELETE or clearance is decided (the
// clearer lists objects long before they are due) warms it then, until it
// is known, and a webhook that just started does not add MaxInFlight to
// the first decision.
func (j *Judge) Warm(ctx context.Context, target index.Source, obj kcp.Meta) bool {
	if j.Currency == nil || j.Activation == nil {
		return true
	}
	_, why := j.guardSince(ctx, target, obj)
	return why == ""
}
