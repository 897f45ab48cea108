package references

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Ledgers records admitted references on protected objects;
// *inflight.Writer implements it.
type Ledgers interface {
	Record(ctx context.Context, t inflight.Target, id string, landed inflight.Landed) (inflight.Result, error)
	// Withdraw removes the mark of a refused admission id again.
	Withdraw(ctx context.Context, t inflight.Target, id string, landed inflight.Landed) error
	// Prime tells the state of a target as just read (its JSON), which the
	// next write of its ledger may start from.
	Prime(t inflight.Target, raw []byte)
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
	// MaxReferences is how many objects one dependent may reference
	// (DefaultMaxReferences if 0 or less), as the ReferenceValidator checks
	// it: a write past it is refused before anything is recorded.
	MaxReferences int
	// GracePeriod is the audit's grace period, for the warnings about
	// references to objects that do not exist; 0 if unknown.
	GracePeriod time.Duration
}

// WithRecording has the LabelMutator record, before it answers, every
// reference a write adds on the object it names (DefaultConcurrency
// objects at a time), and set the dependent's admission id
// (api/v1alpha1.LabelAdmission); it refuses a new reference to an object
// that is being deleted or whose deletion is deferred, and a write past the
// limit of references, and warns about references to objects that do not
// exist, as the ReferenceValidator does: kcp spares the ReferenceValidator
// the writes whose references it recorded (see
// webhookconfig.NotRecordedCondition). Without it, no reference is
// recorded.
func WithRecording(r Recording) LabelOption {
	if r.MaxReferences <= 0 {
		r.MaxReferences = DefaultMaxReferences
	}
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
	// RecordWithdrawn: a reference recorded on an object (counted as
	// recorded or refused) was removed from it again, because the webhook
	// refused the write that added it.
	RecordWithdrawn = "withdrawn"
	// RecordUntracked: the webhook may not patch the object, and the rule
	// says its references are not tracked; the write was admitted
	// unrecorded.
	RecordUntracked = "untracked"
	// RecordFailed: the reference could not be recorded; the write was
	// refused, to be retried.
	RecordFailed = "failed"
)

// record records the references the request adds, if any, and returns the
// value of the admission label the object is to carry (empty: none) and
// the warnings of the write, or the response that refuses the request.
func (m *LabelMutator) record(ctx context.Context, req admission.Request, obj *webhook.Subject, guards []registry.Guard) (string, []string, *admission.Response) {
	r := m.recording
	previous := ""
	if req.Operation == admissionv1.Update {
		previous, _ = jsonparser.GetString(req.OldObject.Raw, "metadata", "labels", depv1alpha1.LabelAdmission)
	}
	refs, err := referencesIn(r.Targets, req, obj, guards)
	if err != nil {
		resp := admission.Errored(http.StatusBadRequest, err)
		return "", nil, &resp
	}
	name := obj.DisplayName()
	refused, warnings := limit{max: r.MaxReferences}.check(req.Kind.Kind, name, refs)
	if refused != nil {
		return "", nil, refused
	}
	if req.DryRun != nil && *req.DryRun || len(refs.added) == 0 {
		return previous, warnings, nil // no side effects in a dry run
	}
	identity := strings.Join([]string{obj.Cluster.String(), req.Resource.Group, req.Resource.Resource, obj.Namespace, obj.Name, obj.GenerateName}, "/")
	now := m.now()
	id, _ := jsonparser.GetString(req.Object.Raw, "metadata", "labels", depv1alpha1.LabelAdmission)
	fresh := id == previous || !r.IDs.Recent(id, identity, now, recentID)
	if fresh {
		id = r.IDs.New(identity, now)
	}
	mk := m.marker()
	out, resp, _ := mk.mark(ctx, req.Kind.Kind, obj, refs.added, id, fresh, guards, now)
	if resp != nil {
		return "", nil, resp
	}
	warnings = append(warnings, missingWarnings(req.Kind.Kind, name, obj.Namespace, out.missing, r.GracePeriod)...)
	if !out.any {
		return previous, warnings, nil
	}
	return id, warnings, nil
}

// marker records the references that one write adds on the objects they
// name, under one admission id: for the LabelMutator, under the id it sets
// on the dependent; for the ReferenceValidator, under the id of the
// revision the write was admitted on (see inflight.RevisionID).
type marker struct {
	r           *Recording
	metrics     *webhook.Metrics
	concurrency int
}

func (m *LabelMutator) marker() marker {
	return marker{r: m.recording, metrics: m.metrics, concurrency: m.concurrency}
}

// markedRefs is what recording the references of a write came to.
type markedRefs struct {
	// any is set if a reference was recorded on an object.
	any bool
	// missing are the references that name no object that exists.
	missing []reference
}

// mark records the references added, which the dependent kind named obj
// adds, under id (concurrency objects at a time; those of many references
// to one namespace after one LIST of them). It returns the response that
// refuses the write, if any, and its outcome: denied if an object it
// references is being deleted or its deletion is deferred, an error if a
// reference could not be recorded (to be retried). A refused write's marks
// are withdrawn if the id is fresh: made for this admission alone.
func (mk marker) mark(ctx context.Context, kind string, obj *webhook.Subject, added []reference, id string, fresh bool, guards []registry.Guard, now time.Time) (markedRefs, *admission.Response, string) {
	r := mk.r
	name := obj.DisplayName()
	ctx, cancel := webhook.WithBudget(ctx, r.Timeout)
	defer cancel()
	// The targets of many references to one namespace are read with one
	// LIST, so that their writes need not read them first; one that does
	// not exist has nothing to record.
	found := make([]bool, len(added))
	listed, err := listTargets(ctx, r.Targets, obj.Cluster, added, mk.concurrency, func(i int, raw []byte, o kcp.Meta) {
		found[i] = true
		r.Ledgers.Prime(inflight.Target{Source: added[i].target, Cluster: obj.Cluster, Namespace: o.Namespace, Name: o.Name}, raw)
	})
	if err != nil {
		mk.metrics.ReferenceRecorded(RecordFailed)
		log.FromContext(ctx).Error(err, "Failed to read the objects a write adds references to", "cluster", obj.Cluster, "references", len(added))
		resp := webhook.Unavailable(fmt.Sprintf("could not record that %s %q references the %d objects it adds references to (reading them failed: %v); retry", kind, name, len(added), err))
		return markedRefs{}, &resp, webhook.DecisionError
	}
	outcomes := make([]recorded, len(added))
	alt, release := alternativesOf(ctx, added)
	defer release()
	i, err := each(ctx, len(added), mk.concurrency, func(ctx context.Context, i int) error {
		if listed[i] && !found[i] {
			mk.metrics.ReferenceRecorded(RecordMissing)
			outcomes[i].missing = true
			return nil
		}
		cut, err := alt.do(ctx, i, func(ctx context.Context) (bool, error) {
			var err error
			outcomes[i], err = mk.recordOne(ctx, kind, name, obj, added[i], id, guards, now)
			return !outcomes[i].missing, err
		})
		if cut {
			outcomes[i] = recorded{missing: true}
		}
		return err
	})
	if err == nil {
		i, err = alt.firstError()
	}
	if err != nil {
		mk.withdraw(ctx, id, fresh, outcomes)
		return markedRefs{}, mk.recordFailed(ctx, kind, name, obj, added[i], err), webhook.DecisionError
	}
	var out markedRefs
	var problems []string
	for _, o := range outcomes {
		out.any = out.any || o.any
		problems = append(problems, o.problems...)
	}
	out.missing = unresolved(added, func(i int) bool { return outcomes[i].missing })
	if len(problems) > 0 {
		mk.withdraw(ctx, id, fresh, outcomes)
		resp := denied(problems)
		return markedRefs{}, &resp, webhook.DecisionDenied
	}
	return out, nil, webhook.DecisionAllowed
}

// recorded is what recording one reference came to.
type recorded struct {
	// any is set if it was recorded on an object.
	any bool
	// problems are the sentences that refuse it: an object it names is
	// being deleted, or its deletion is deferred.
	problems []string
	// missing is set if it names no object that exists.
	missing bool
	// marked are the objects it was recorded on that are not being
	// deleted: if the write is refused, the marks are withdrawn from them.
	marked []inflight.Target
}

// withdraw removes the marks of the refused admission id from the objects
// the outcomes recorded it on (see inflight.Writer.Withdraw), so that
// their DELETEs need not wait for a reference that can never be stored.
// The refusal stands whether or not this succeeds: a mark left behind only
// holds DELETEs back until MaxInFlight has passed. Only an id generated
// for this admission (fresh) is withdrawn: one found on the object may be
// another request's, whose marks are its own.
func (mk marker) withdraw(ctx context.Context, id string, fresh bool, outcomes []recorded) {
	if !fresh {
		return
	}
	r := mk.r
	var marked []inflight.Target
	for _, o := range outcomes {
		marked = append(marked, o.marked...)
	}
	if len(marked) == 0 {
		return
	}
	if _, err := each(ctx, len(marked), mk.concurrency, func(ctx context.Context, i int) error {
		t := marked[i]
		if err := r.Ledgers.Withdraw(ctx, t, id, r.Landed(t.Source)); err != nil {
			log.FromContext(ctx).Error(err, "Failed to withdraw the mark of a refused write; it holds DELETEs of the object back until it expires",
				"cluster", t.Cluster, "target", t.Source, "namespace", t.Namespace, "name", t.Name)
			return nil
		}
		mk.metrics.ReferenceRecorded(RecordWithdrawn)
		return nil
	}); err != nil {
		log.FromContext(ctx).Error(err, "Failed to withdraw the marks of a refused write")
	}
}

// recordOne records the reference ref under the admission id on the
// objects it names (for a cluster-scoped dependent's reference that names
// no namespace, the objects of that name in every namespace), counting the
// result of each in the metrics. It fails if the reference could not be
// recorded; the write must then be refused, to be retried.
func (mk marker) recordOne(ctx context.Context, kind, name string, obj *webhook.Subject, ref reference, id string, guards []registry.Guard, now time.Time) (recorded, error) {
	r := mk.r
	targets := []inflight.Target{{Source: ref.target, Cluster: obj.Cluster, Namespace: ref.namespace, Name: ref.name}}
	if ref.namespace == "" && r.Targets.State(ref.target).Namespaced {
		objs, err := r.Targets.Lookup(ctx, ref.target, obj.Cluster, "", ref.name)
		if err != nil {
			return recorded{}, err
		}
		targets = targets[:0]
		for _, o := range objs {
			targets = append(targets, inflight.Target{Source: ref.target, Cluster: obj.Cluster, Namespace: o.Namespace, Name: o.Name})
		}
	}
	var out recorded
	exist := 0
	for _, t := range targets {
		res, err := r.Ledgers.Record(ctx, t, id, r.Landed(t.Source))
		switch {
		case err != nil && apierrors.IsForbidden(err) && untracked(guards, ref.target, now) && !errors.Is(err, inflight.ErrMayBeCleared):
			mk.metrics.ReferenceRecorded(RecordUntracked)
			// Admitted unrecorded, but checked: kcp spares the
			// ReferenceValidator a write with another reference recorded.
			objs, err := r.Targets.Lookup(ctx, ref.target, obj.Cluster, t.Namespace, t.Name)
			if err != nil {
				return recorded{}, err
			}
			for _, o := range objs {
				if p := problemOf(kind, name, obj.Namespace, ref, o, r.Records); p != "" {
					out.problems = append(out.problems, p)
				}
			}
			exist += len(objs)
		case err != nil:
			return recorded{}, err
		case res.Missing:
			mk.metrics.ReferenceRecorded(RecordMissing)
		default:
			exist++
			if !res.Object.Terminating {
				out.marked = append(out.marked, t)
			}
			if p := problemOf(kind, name, obj.Namespace, ref, res.Object, r.Records); p != "" {
				mk.metrics.ReferenceRecorded(RecordRefused)
				out.problems = append(out.problems, p)
				continue
			}
			mk.metrics.ReferenceRecorded(RecordRecorded)
			out.any = true
		}
	}
	out.missing = exist == 0
	return out, nil
}

// recordFailed is the answer when a reference could not be recorded.
func (mk marker) recordFailed(ctx context.Context, kind, name string, obj *webhook.Subject, ref reference, err error) *admission.Response {
	mk.metrics.ReferenceRecorded(RecordFailed)
	log.FromContext(ctx).Error(err, "Failed to record a reference on the object it names", "cluster", obj.Cluster, "target", ref.target, "name", ref.name)
	msg := fmt.Sprintf("could not record that %s %q references %s %s (%v); retry", kind, name, ref.target.Resource.Resource, ref.describe(obj.Namespace), err)
	switch {
	case apierrors.IsForbidden(err) && errors.Is(err, inflight.ErrMayBeCleared):
		msg = fmt.Sprintf("could not record that %s %q references %s %s: the dependency webhook may not patch %s (%v), and the object may carry the webhook's clearance, with which kcp deletes it without asking the webhook and which only that write removes; its provider grants patch on the content of its APIExport; retry",
			kind, name, ref.target.Resource.Resource, ref.describe(obj.Namespace), ref.target.Resource.GroupResource(), err)
	case apierrors.IsForbidden(err):
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
