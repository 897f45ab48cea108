package deletion

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/horizon"
)

// WithHorizon decides the allowed DELETEs of objects whose references are
// tracked (see package inflight and docs/architecture.md, "The fast paths,
// and why each is sound") without reading dependents once the index is
// current past the object's horizon, and refuses a DELETE while a
// reference to the object is in flight. Without it, every allowed DELETE is
// confirmed with a live read, and references in flight are not looked at.
//
// With leases, a DELETE whose object carries leases waits for them to end
// (see inflight.Lease) and decides on the object as it then is.
func WithHorizon(c horizon.Currency, a horizon.Activation, leases horizon.Leases) Option {
	return func(v *Validator) { v.horizon = &horizon.Judge{Currency: c, Activation: a, Leases: leases} }
}

// unleased is h, or, if the object carries leases, what it says once they
// have ended; d's object is then the one read.
//
// A clearance is not decided on another state than the one it is written
// on: the leases count as references in flight.
func (v *Validator) unleased(ctx context.Context, d *deletion, h horizon.Object) horizon.Object {
	if len(h.Ledger.Leases) == 0 || d.clearing {
		return h
	}
	wctx, cancel := webhook.WithBudget(ctx, v.timeout)
	defer cancel()
	meta, fresh, ok := v.horizon.Unleased(wctx, d.denial.source, d.obj.Meta, h)
	if !ok {
		d.logger.V(1).Info("Could not read the object once its leases ended; they count as references in flight", "leases", len(h.Ledger.Leases))
		return h
	}
	d.obj.Meta = meta
	return fresh
}

// How a DELETE was allowed without a read: the index being current past
// the object's horizon, or, for an object whose deletion is deferred, past
// what its ledger records and its own revision (see deferred).
const (
	viaHorizon  = "horizon"
	viaRevision = "revision"
)

// deferred reports whether the object of d carries a record of a deferred
// deletion that verifies: its deletion was requested, and refused while
// dependents referenced it, before this DELETE (a replay, or the request
// again). Such a DELETE is allowed once the index has stored every
// dependent up to the object's own revision, rather than past the
// object's creation plus MaxInFlight (see horizon.Judge.Current): for an
// object young enough to need a read, that is what spares the replays of a
// stack deleted in one go their reads. It is never the answer for a
// clearance, which kcp honours without asking.
func (v *Validator) deferred(d *deletion) bool {
	return !d.clearing && v.recorder != nil && d.obj.DeletionRequested && v.recorder.Verify(d.target, d.obj.Meta) == nil
}

// groups returns the dependent groups of d as the horizon judges them.
func (d *deletion) horizonGroups() []horizon.Group {
	out := make([]horizon.Group, len(d.groups))
	for i, g := range d.groups {
		out[i] = horizon.Group{Source: g.src, Synced: g.synced, Scheme: g.scheme, Tracked: g.tracked, TrackedSince: g.trackedSince}
		if g.unlabellable {
			out[i].Checked = g.paths
		}
	}
	return out
}

// settle looks at the references the object's ledger records. While one may
// still be in flight, it waits a moment for it to land; if a reference
// landed, the index decides again (the dependent that made it may block).
// It returns a response if that decided, and otherwise the assessment of
// the ledger and whether a reference may still be in flight: then the
// DELETE is confirmed with a live read (which finds the dependent if it
// was stored, and the index only lagged behind), and refused rather than
// allowed if the read finds no blocker.
func (v *Validator) settle(ctx context.Context, d *deletion, h horizon.Object) (admission.Response, decision, inflight.Assessment, bool, bool) {
	groups := d.horizonGroups()
	landed := v.horizon.Landed(groups)
	a := h.Ledger.Assess(v.now(), h.Created, landed)
	if len(a.InFlight) == 0 && !a.FloorInFlight {
		return admission.Response{}, decision{}, a, false, false
	}
	if len(a.InFlight) > 0 {
		wctx, cancel := webhook.WithBudget(ctx, v.timeout)
		v.horizon.WaitLanded(wctx, groups, a.InFlight)
		cancel()
		a = h.Ledger.Assess(v.now(), h.Created, landed)
		if resp, dec, decided := v.fromIndex(ctx, d); decided {
			return resp, dec, a, true, false
		}
	}
	return admission.Response{}, decision{}, a, false, len(a.InFlight) > 0 || a.FloorInFlight
}

// refuseInFlight answers a DELETE while a reference to the object may be in
// flight: a dependent's create or update recorded it on the object, and
// has neither been stored nor failed for certain yet. Under Replay rules,
// the deletion is deferred instead, as for a denial.
func (v *Validator) refuseInFlight(ctx context.Context, d *deletion, a inflight.Assessment) admission.Response {
	retry := a.Retry()
	wait := max(time.Duration(math.Ceil(retry.Sub(v.now()).Seconds()))*time.Second, time.Second)
	kinds := make([]string, 0, len(d.groups))
	for _, g := range d.groups {
		kinds = append(kinds, g.kind)
	}
	admitted := "admitted at " + a.Floor.UTC().Format(time.RFC3339Nano)
	switch {
	case len(a.InFlight) > 0:
		admitted = "admitted at " + a.InFlight[0].At.UTC().Format(time.RFC3339Nano)
	case slices.ContainsFunc(a.Leases, func(l inflight.Lease) bool { return l.Until.Equal(a.Floor) }):
		admitted = "admitted under the webhook's lease on it until " + a.Floor.UTC().Format(time.RFC3339Nano)
	}
	msg := fmt.Sprintf("%s %q%s may be referenced by a %s whose create or update is in flight (%s, not stored yet); retry in %s",
		d.target.Resource, d.obj.Name, inNamespace(d.obj.Namespace), strings.Join(kinds, " or "), admitted, wait)
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
