package references

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/buger/jsonparser"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Ledgers records admitted references on protected objects;
// *inflight.Writer implements it.
type Ledgers interface {
	Record(ctx context.Context, t inflight.Target, id string, landed inflight.Landed) (inflight.Result, error)
}

// Recording is what the labelling webhook needs to record the references a
// write adds on the objects they name (see package inflight): the rules of
// the dependent type, the targets' state and reads, the writer of ledgers,
// the admission ids, which admission ids the index has seen on dependents
// of a protected type (so that the writer can fold their marks), and the
// records of deferred deletions.
type Recording struct {
	Guards  GuardFinder
	Targets Targets
	Ledgers Ledgers
	IDs     *inflight.IDs
	Landed  func(target index.Source) inflight.Landed
	Records Verifier
	// Timeout bounds the writes of one request (the time kcp waits bounds
	// it too).
	Timeout time.Duration
}

// WithRecording has the LabelMutator record, before it answers, every
// reference a write adds on the object it names, and set the dependent's
// admission id (api/v1alpha1.LabelAdmission); it refuses a new reference to
// an object that is being deleted or whose deletion is deferred, as the
// ReferenceValidator does. Without it, no reference is recorded.
func WithRecording(r Recording) LabelOption {
	return func(m *LabelMutator) { m.recording = &r }
}

// untrackedGrace is how long the ReferencesTracked condition of a rule must
// have said False before a reference the webhook cannot record is admitted
// unrecorded: every replica has seen the condition by then, and stopped
// deciding deletes without a read.
const untrackedGrace = 10 * time.Second

// recentID is how long an admission id found on the object is taken for the
// one this request's earlier call of the webhook made: kcp calls a
// mutating webhook again within the same request if a later one changed the
// object.
const recentID = 30 * time.Second

// Results of recording a reference, the values of the result label of
// dependency_webhook_references_recorded_total.
const (
	// RecordRecorded: the reference was recorded on its object.
	RecordRecorded = "recorded"
	// RecordMissing: the object does not exist; nothing to record.
	RecordMissing = "missing"
	// RecordRefused: the object is being deleted, or its deletion is
	// deferred; the write was refused.
	RecordRefused = "refused"
	// RecordUntracked: the webhook may not patch the object, and the rule
	// says its references are not tracked; the write was admitted
	// unrecorded.
	RecordUntracked = "untracked"
	// RecordFailed: the reference could not be recorded; the write was
	// refused, to be retried.
	RecordFailed = "failed"
)

// record records the references the request adds, if any, and returns the
// value of the admission label the object is to carry (empty: none), or
// the response that refuses the request.
func (m *LabelMutator) record(ctx context.Context, req admission.Request, obj *webhook.Subject, guards []registry.Guard) (string, *admission.Response) {
	r := m.recording
	previous := ""
	if req.Operation == admissionv1.Update {
		previous, _ = jsonparser.GetString(req.OldObject.Raw, "metadata", "labels", depv1alpha1.LabelAdmission)
	}
	if req.DryRun != nil && *req.DryRun {
		return previous, nil // no side effects in a dry run
	}
	added, err := addedReferences(r.Targets, req, obj, guards)
	if err != nil {
		resp := admission.Errored(400, err)
		return "", &resp
	}
	if len(added) == 0 {
		return previous, nil
	}
	identity := strings.Join([]string{obj.Cluster.String(), req.Resource.Group, req.Resource.Resource, obj.Namespace, obj.Name, obj.GenerateName}, "/")
	now := m.now()
	id, _ := jsonparser.GetString(req.Object.Raw, "metadata", "labels", depv1alpha1.LabelAdmission)
	if id == previous || !r.IDs.Recent(id, identity, now, recentID) {
		id = r.IDs.New(identity, now)
	}
	ctx, cancel := webhook.WithBudget(ctx, r.Timeout)
	defer cancel()
	name := obj.Name
	if name == "" {
		name = obj.GenerateName + "<generated>"
	}
	recorded := false
	var problems []string
	for _, ref := range added {
		targets := []inflight.Target{{Source: ref.target, Cluster: obj.Cluster, Namespace: ref.namespace, Name: ref.name}}
		if ref.namespace == "" && r.Targets.State(ref.target).Namespaced {
			// A cluster-scoped dependent's reference that names no
			// namespace names the objects of that name in every namespace.
			found, err := r.Targets.Lookup(ctx, ref.target, obj.Cluster, "", ref.name)
			if err != nil {
				return "", m.recordFailed(ctx, req.Kind.Kind, name, obj, ref, err)
			}
			targets = targets[:0]
			for _, o := range found {
				targets = append(targets, inflight.Target{Source: ref.target, Cluster: obj.Cluster, Namespace: o.Namespace, Name: o.Name})
			}
		}
		for _, t := range targets {
			res, err := r.Ledgers.Record(ctx, t, id, r.Landed(t.Source))
			switch {
			case err != nil && apierrors.IsForbidden(err) && untracked(guards, ref.target, now):
				m.metrics.ReferenceRecorded(RecordUntracked)
			case err != nil:
				return "", m.recordFailed(ctx, req.Kind.Kind, name, obj, ref, err)
			case res.Missing:
				m.metrics.ReferenceRecorded(RecordMissing)
			case res.Object.Terminating:
				m.metrics.ReferenceRecorded(RecordRefused)
				problems = append(problems, fmt.Sprintf("%s %q cannot reference %s %s: it is being deleted", req.Kind.Kind, name, ref.target.Resource.Resource, ref.describe(obj.Namespace)))
			case res.Object.DeletionRequested && r.Records != nil && r.Records.Verify(ref.target.Resource.GroupResource(), res.Object) == nil:
				m.metrics.ReferenceRecorded(RecordRefused)
				problems = append(problems, fmt.Sprintf("%s %q cannot reference %s %s: its deletion is deferred until nothing references it (remove its label %s to cancel)",
					req.Kind.Kind, name, ref.target.Resource.Resource, ref.describe(obj.Namespace), depv1alpha1.LabelDeletionRequested))
			default:
				m.metrics.ReferenceRecorded(RecordRecorded)
				recorded = true
			}
		}
	}
	if len(problems) > 0 {
		resp := admission.Denied(strings.Join(problems, "; "))
		resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionDenied}
		return "", &resp
	}
	if !recorded {
		return previous, nil
	}
	return id, nil
}

// recordFailed is the answer when a reference could not be recorded.
func (m *LabelMutator) recordFailed(ctx context.Context, kind, name string, obj *webhook.Subject, ref reference, err error) *admission.Response {
	m.metrics.ReferenceRecorded(RecordFailed)
	log.FromContext(ctx).Error(err, "Failed to record a reference on the object it names", "cluster", obj.Cluster, "target", ref.target, "name", ref.name)
	msg := fmt.Sprintf("could not record that %s %q references %s %s (%v); retry", kind, name, ref.target.Resource.Resource, ref.describe(obj.Namespace), err)
	if apierrors.IsForbidden(err) {
		msg = fmt.Sprintf("could not record that %s %q references %s %s: the dependency webhook may not patch %s (%v); its provider grants patch on the content of its APIExport, or the rule reports ReferencesTracked=False and references are admitted unrecorded within %s; retry",
			kind, name, ref.target.Resource.Resource, ref.describe(obj.Namespace), ref.target.Resource.GroupResource(), err, untrackedGrace)
	}
	resp := webhook.Unavailable(msg)
	return &resp
}

// untracked reports whether every rule of guards that references target
// says its references are not tracked, for untrackedGrace or more (or says
// nothing yet): then no replica decides a delete of target without a read,
// and a reference that cannot be recorded may be admitted unrecorded.
func untracked(guards []registry.Guard, target index.Source, now time.Time) bool {
	for _, g := range guards {
		for _, ref := range g.References {
			if ref.Target != target {
				continue
			}
			if g.Tracking.Status == "" {
				continue
			}
			since, ok := g.Tracking.Untracked()
			if !ok || now.Sub(since) < untrackedGrace {
				return false
			}
		}
	}
	return true
}
