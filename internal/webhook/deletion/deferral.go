package deletion

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/message"
)

// Records verifies and writes the records of deferred deletions on
// objects; *replay.Records implements it.
type Records interface {
	// Verify returns nil if obj, an object of target, carries a record
	// of a deferred deletion that verifies (see package records).
	Verify(target schema.GroupResource, obj kcp.Meta) error
	// Record records on obj, an object of target as its provider serves
	// it, that its deletion was requested, if obj is still the version the
	// DELETE was about.
	Record(ctx context.Context, target index.Source, obj kcp.Meta, request depv1alpha1.DeletionRequest) error
}

// Outcomes of deferring a deletion, the values of the result label of
// dependency_webhook_deletions_deferred_total.
const (
	// DeferredRecorded: the request was recorded on the object.
	DeferredRecorded = "recorded"
	// DeferredAlready: the object's deletion was deferred before.
	DeferredAlready = "already"
	// DeferredDryRun: a dry run; nothing was recorded.
	DeferredDryRun = "dry-run"
	// DeferredFailed: the request could not be recorded (no consent to
	// patch, or kcp failed); the DELETE is denied as under Deny.
	DeferredFailed = "failed"
)

// WithRecorder defers deletions under rules with the Replay deletion policy:
// a denied DELETE is recorded on the object through r.
func WithRecorder(r Records) Option {
	return func(v *Validator) { v.recorder = r }
}

// deferDeletion records the request on the object (not for a dry run, nor
// twice) and returns the denial message saying so, and whether the deletion
// is deferred.
func (v *Validator) deferDeletion(ctx context.Context, d denial, msg string) (string, bool) {
	dependents := "its dependent is"
	if n := len(d.blockers); n > 1 {
		dependents = fmt.Sprintf("its %d dependents are", n)
	}
	if d.inFlight {
		dependents = "the reference in flight has been stored or has failed and its dependents are"
	}
	cancel := fmt.Sprintf("remove its label %s to cancel", depv1alpha1.LabelDeletionRequested)
	switch {
	case d.req.DryRun != nil && *d.req.DryRun:
		v.metrics.Deferred(DeferredDryRun)
		return fmt.Sprintf("%s; its deletion would be deferred until %s gone", msg, dependents), false
	case d.obj.DeletionRequested && v.recorder.Verify(d.target, d.obj.Meta) == nil:
		// Also the answer to the DELETE that recorded it: the record
		// changes the object, so kcp admits that DELETE again on the new
		// state before it answers.
		v.metrics.Deferred(DeferredAlready)
		return fmt.Sprintf("%s; its deletion is deferred: it will be deleted once %s gone (%s)", msg, dependents, cancel), true
	}
	request, err := records.Request(d.req.UserInfo.Username, v.now(), d.req.Options.Raw)
	if err == nil {
		ctx, stop := webhook.WithBudget(ctx, v.timeout)
		defer stop()
		err = v.recorder.Record(ctx, d.source, d.obj.Meta, request)
	}
	if err != nil {
		v.metrics.Deferred(DeferredFailed)
		d.logger.Error(err, "Failed to defer a deletion")
		return fmt.Sprintf("%s; its deletion could not be deferred (%v)", msg, err), false
	}
	v.metrics.Deferred(DeferredRecorded)
	return fmt.Sprintf("%s; its deletion is deferred: it will be deleted once %s gone (%s)", msg, dependents, cancel), true
}

// Referenced reports whether the index holds a dependent, not being
// deleted, that references obj, an object of target (a protected resource
// as its provider serves it), under the rules that protect it. It reads
// nothing live: a miss is no proof, and whoever acts on it deletes through
// kcp, whose admission asks Handle.
func (v *Validator) Referenced(target index.Source, obj kcp.Meta) bool {
	gr := target.Resource.GroupResource()
	entries := v.rules.Find(registry.Target{Cluster: target.Export.Cluster, Resource: gr})
	self := selfRef{target: gr, namespace: obj.Namespace, name: obj.Name, uid: obj.UID}
	for _, g := range v.groupByDependent(entries, obj.Namespace) {
		if len(v.blocking(g, self, v.dependents.Hits(g.src, g.paths, obj.Cluster, g.namespace, obj.Name))) > 0 {
			return true
		}
	}
	return false
}

// The causes of a denial's status details (see package message), for
// tools that read denials.
const (
	CauseBlocker  = message.CauseBlocker
	CauseBlockers = message.CauseBlockers
)

// Blocker is a dependent that still references the object being deleted
// (see package message).
type Blocker = message.Blocker
