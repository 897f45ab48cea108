package deletion

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/buger/jsonparser"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
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
}

// Activation tells since when an admission webhook is in effect on a
// shard; *tracking.Tracker implements it.
type Activation interface {
	Since(ctx context.Context, key tracking.Key, obj tracking.Object) (time.Time, bool)
}

// WithHorizon decides the allowed DELETEs of objects whose references are
// tracked (see package inflight and docs/architecture.md, "The fast paths,
// and why each is sound") without reading dependents once the index is
// current past the object's horizon, and refuses a DELETE while a
// reference to the object is in flight. Without it, every allowed DELETE is
// confirmed with a live read, and references in flight are not looked at.
func WithHorizon(c Currency, a Activation) Option {
	return func(v *Validator) { v.currency, v.activation = c, a }
}

// inFlightWait bounds how long a DELETE waits for references in flight to
// land before it refuses: a dependent whose admission recorded its
// reference is stored moments later, unless another webhook holds it up.
const inFlightWait = 2 * time.Second

// viaHorizon: a DELETE allowed without a read, the index being current past
// the object's horizon.
const viaHorizon = "horizon"

// horizon is what the object's own state says about its references: its
// ledger, as the DELETE's admission sees it (the state the DELETE commits
// against), and when it was created.
type horizon struct {
	ledger  inflight.Ledger
	created time.Time
	// malformed is set when the ledger did not parse: nothing is decided
	// from it.
	malformed bool
}

// readHorizon reads the ledger and the creation time of the object being
// deleted from its JSON.
func readHorizon(raw []byte) horizon {
	var h horizon
	var err error
	if h.ledger, err = inflight.LedgerOf(raw); err != nil {
		h.malformed = true
	}
	if ts, err := jsonparser.GetString(raw, "metadata", "creationTimestamp"); err == nil {
		if t, err := time.Parse(time.RFC3339, ts); err == nil {
			h.created = t
		}
	}
	return h
}

// landed tells whether the index has seen an admission id on a dependent of
// any of the groups.
func (v *Validator) landed(groups []*dependentGroup) inflight.Landed {
	return func(id string) (time.Time, bool) {
		for _, g := range groups {
			if t, ok := v.currency.Admitted(g.src, id); ok {
				return t, true
			}
		}
		return time.Time{}, false
	}
}

// settle looks at the references the object's ledger records. While one may
// still be in flight, it waits a moment for it to land; if a reference
// landed, the index decides again (the dependent that made it may block).
// It returns a response if that decided, and otherwise the assessment of
// the ledger and whether a reference may still be in flight: then the
// DELETE is confirmed with a live read (which finds the dependent if it
// was stored, and the index only lagged behind), and refused rather than
// allowed if the read finds no blocker.
func (v *Validator) settle(ctx context.Context, d *deletion, h horizon) (admission.Response, decision, inflight.Assessment, bool, bool) {
	landed := v.landed(d.groups)
	a := h.ledger.Assess(v.now(), h.created, landed)
	if len(a.InFlight) == 0 && !a.FloorInFlight {
		return admission.Response{}, decision{}, a, false, false
	}
	if len(a.InFlight) > 0 {
		v.waitLanded(ctx, d.groups, a.InFlight)
		a = h.ledger.Assess(v.now(), h.created, landed)
		if resp, dec, decided := v.fromIndex(ctx, d); decided {
			return resp, dec, a, true, false
		}
	}
	return admission.Response{}, decision{}, a, false, len(a.InFlight) > 0 || a.FloorInFlight
}

// waitLanded waits, at most inFlightWait and within the decision's budget,
// until the index has seen every mark on a dependent of one of the groups.
func (v *Validator) waitLanded(ctx context.Context, groups []*dependentGroup, marks []inflight.Mark) {
	ctx, cancel := webhook.WithBudget(ctx, v.timeout)
	defer cancel()
	ctx, stop := context.WithTimeout(ctx, inFlightWait)
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
					if _, ok := v.currency.WaitAdmitted(mctx, g.src, m.ID); ok {
						once.Do(done)
					}
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
}

// refuseInFlight answers a DELETE while a reference to the object may be in
// flight: a dependent's create or update recorded it on the object, and
// has neither been stored nor failed for certain yet. Under Replay rules,
// the deletion is deferred instead, as for a denial.
func (v *Validator) refuseInFlight(ctx context.Context, d *deletion, a inflight.Assessment, floor time.Time) admission.Response {
	retry := a.Retry(floor)
	wait := max(time.Duration(math.Ceil(retry.Sub(v.now()).Seconds()))*time.Second, time.Second)
	kinds := make([]string, 0, len(d.groups))
	for _, g := range d.groups {
		kinds = append(kinds, g.kind)
	}
	since := floor
	if len(a.InFlight) > 0 {
		since = a.InFlight[0].At
	}
	msg := fmt.Sprintf("%s %q%s may be referenced by a %s whose create or update is in flight (admitted at %s, not stored yet); retry in %s",
		d.target.Resource, d.obj.Name, inNamespace(d.obj.Namespace), strings.Join(kinds, " or "), since.UTC().Format(time.RFC3339Nano), wait)
	d.logger.V(1).Info("Refused a deletion while a reference to the object is in flight", "inFlight", len(a.InFlight), "floorInFlight", a.FloorInFlight, "retryAfter", wait)
	audit := map[string]string{webhook.AuditDecision: webhook.DecisionInFlight}
	if d.denial.deferrable && allReplay(d.groups) {
		dn := d.denial
		dn.inFlight = true
		var deferred bool
		if msg, deferred = v.deferDeletion(ctx, dn, msg); deferred {
			audit[AuditDeferred] = "true"
		}
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusConflict,
			Reason:  metav1.StatusReasonConflict,
			Message: msg,
			Details: &metav1.StatusDetails{RetryAfterSeconds: int32(wait / time.Second)},
		},
		AuditAnnotations: audit,
	}}
}

// allReplay reports whether every rule of every group defers deletions.
func allReplay(groups []*dependentGroup) bool {
	for _, g := range groups {
		if !g.replay {
			return false
		}
	}
	return len(groups) > 0
}

func inNamespace(namespace string) string {
	if namespace == "" {
		return ""
	}
	return fmt.Sprintf(" in namespace %q", namespace)
}

// current reports whether the index holds every dependent that can
// reference the object, so that the DELETE needs no read: for every group,
// the rules track its references (ReferencesTracked, since some time), the
// labelling webhook of the dependents with their current scheme and the
// guard of the object's ledger are in effect on the shard (see package
// tracking), and the index is current past the latest of the ledger's
// horizon and MaxInFlight after each of those began. References recorded
// before any of them may have landed up to MaxInFlight later; the index
// holds them once it is current past that. If not, it says why.
func (v *Validator) current(ctx context.Context, d *deletion, a inflight.Assessment) (bool, string) {
	if v.currency == nil || v.activation == nil || len(d.groups) == 0 {
		return false, "no horizon"
	}
	if a.Horizon.IsZero() {
		return false, "the object has no creation time"
	}
	horizon := a.Horizon
	later := func(t time.Time) {
		if t = t.Add(inflight.MaxInFlight); t.After(horizon) {
			horizon = t
		}
	}
	target := d.denial.source
	shard, known := v.currency.ServingURL(target, d.obj.Cluster)
	if !known {
		return false, "the shard of the workspace is not known yet"
	}
	guard, ok := v.activation.Since(ctx, tracking.Key{Kind: tracking.KindGuard, Source: target, Shard: shard},
		tracking.Object{Cluster: d.obj.Cluster, Namespace: d.obj.Namespace, Name: d.obj.Name})
	if !ok {
		return false, "the guard of the ledger is not known to be in effect on the shard"
	}
	later(guard)
	for _, g := range d.groups {
		switch {
		case !g.synced:
			return false, fmt.Sprintf("%s is not synced", g.src)
		case g.scheme == "":
			return false, fmt.Sprintf("%s is not labelled", g.src)
		case !g.tracked:
			return false, fmt.Sprintf("the rules of %s do not report ReferencesTracked=True", g.src)
		}
		later(g.trackedSince)
		url, probe, ok := v.currency.Dependent(g.src, d.obj.Cluster)
		if !ok {
			return false, fmt.Sprintf("no dependent of %s on the shard to probe with", g.src)
		}
		labelling, ok := v.activation.Since(ctx, tracking.Key{Kind: tracking.KindLabelling, Source: g.src, Shard: url, Scheme: g.scheme},
			tracking.Object{Cluster: probe.Cluster, Namespace: probe.Namespace, Name: probe.Name})
		if !ok {
			return false, fmt.Sprintf("the labelling webhook of %s is not known to be in effect on the shard", g.src)
		}
		later(labelling)
	}
	for _, g := range d.groups {
		c, ok := v.currency.Currency(g.src, d.obj.Cluster)
		switch {
		case !ok:
			return false, fmt.Sprintf("the index of %s does not know how current it is", g.src)
		case c.Before(horizon):
			return false, fmt.Sprintf("the index of %s is current until %s, before the horizon %s", g.src, c.UTC().Format(time.RFC3339), horizon.UTC().Format(time.RFC3339))
		}
	}
	return true, ""
}
