package references

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// LabellingFinder finds how the dependents of a type are labelled;
// *registry.Registry implements it.
type LabellingFinder interface {
	Labelling(dependent registry.Target) (registry.Labelling, bool)
}

// Results of the LabelMutator, the values of the result label of
// dependency_webhook_labels_total.
const (
	// LabelsChanged: the managed labels were set anew.
	LabelsChanged = "changed"
	// LabelsUnchanged: they were right already.
	LabelsUnchanged = "unchanged"
	// LabelsUnvouched: the configuration that called was made for another
	// scheme than the webhook's rules, so the labels were set without the
	// scheme label (the dependent is read in full until the two agree).
	LabelsUnvouched = "unvouched"
)

// LabelMutator is the mutating admission.Handler that kcp calls for every
// CREATE and UPDATE of a dependent (that changes its labels or the fields
// its references lie in): it sets the dependent's reference labels to what
// the rules of its type make of the object, removing any other label with
// a managed key (see package reflabels). Users can therefore neither forge
// nor remove them: whatever a request sets, the labels that get stored are
// computed here, and kcp calls the webhook again if a later mutating webhook
// changes the object.
//
// The scheme label, which the DELETE path trusts, is set only when the
// scheme of the configuration that called (in its URL, computed by the
// controller from the rules it sees) is the scheme of the webhook's own
// rules: the configuration's match condition then covers every field the
// labels are computed from.
//
// With recording (WithRecording), it also records every reference the
// write adds on the object it names before it answers, and sets the
// dependent's admission id (see package inflight).
type LabelMutator struct {
	rules       LabellingFinder
	readiness   webhook.Readiness
	metrics     *webhook.Metrics
	recording   *Recording
	probes      *webhook.Prober
	concurrency int
	now         func() time.Time
}

// LabelOption configures a LabelMutator.
type LabelOption func(*LabelMutator)

// WithLabellingProbes has the LabelMutator answer the probes with which
// the webhook learns that kcp calls it on a shard (see package tracking,
// KindLabelling): a dry run of the webhook's own user that sets the scheme
// label to a probe's value, which the mutator sets back to the scheme it
// vouches for, gets the signed answer too (see webhook.Prober).
func WithLabellingProbes(p *webhook.Prober) LabelOption {
	return func(m *LabelMutator) { m.probes = p }
}

// NewLabelMutator returns a mutator that finds the schemes of dependent
// types in rules, and waits until readiness reports them loaded.
func NewLabelMutator(rules LabellingFinder, readiness webhook.Readiness, metrics *webhook.Metrics, opts ...LabelOption) *LabelMutator {
	m := &LabelMutator{rules: rules, readiness: readiness, metrics: metrics, concurrency: DefaultConcurrency, now: time.Now}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Handle implements admission.Handler.
func (m *LabelMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp, result := m.handle(ctx, req)
	m.metrics.Labelled(result)
	return resp
}

func (m *LabelMutator) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update || req.SubResource != "" {
		// A subresource cannot change labels.
		return admission.Allowed(""), LabelsUnchanged
	}
	if !m.readiness.Loaded() {
		return webhook.NotLoaded(), webhook.DecisionError
	}
	obj, errResp := webhook.ReadWriteSubject(ctx, req)
	if errResp != nil {
		return *errResp, webhook.DecisionError
	}
	var meta struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(req.Object.Raw, &meta); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to decode the object's labels: %w", err)), webhook.DecisionError
	}
	want := map[string]string{}
	var warnings []string
	result := LabelsChanged
	// vouched is the scheme whose label the mutator sets, if any.
	vouched := ""
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	if l, ok := m.rules.Labelling(registry.Target{Cluster: obj.Provider, Resource: gr}); ok && l.Labellable {
		var err error
		if want, err = l.Scheme.Labels(req.Object.Raw); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to read the references of the object: %w", err)), webhook.DecisionError
		}
		if webhook.SchemeFrom(ctx) != l.Scheme.Fingerprint {
			delete(want, depv1alpha1.LabelReferencesScheme)
			result = LabelsUnvouched
		} else {
			vouched = l.Scheme.Fingerprint
		}
		if m.recording != nil && !obj.Terminating {
			id, warned, resp := m.record(ctx, req, obj, m.recording.Guards.FindGuards(registry.Target{Cluster: obj.Provider, Resource: gr}))
			if resp != nil {
				return *resp, webhook.DecisionError
			}
			warnings = warned
			if id != "" {
				want[depv1alpha1.LabelAdmission] = id
			}
		}
	}
	ops := reflabels.Patch(meta.Metadata.Labels, want)
	if vouched != "" {
		if op, ok := m.probes.Answer(ctx, req, tracking.KindLabelling, meta.Metadata.Labels[depv1alpha1.LabelReferencesScheme], vouched); ok {
			ops, result = append(ops, op), webhook.ResultProbe
		}
	}
	if len(ops) == 0 {
		if result == LabelsChanged {
			result = LabelsUnchanged
		}
		return withWarnings(admission.Allowed(""), warnings), result
	}
	return withWarnings(admission.Patched("", ops...), warnings), result
}
