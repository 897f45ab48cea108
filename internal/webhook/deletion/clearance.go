package deletion

import (
	"cmp"
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Clearance decides whether an object of resource, served by the workspace
// of the logical cluster provider (raw, its JSON as stored), may be
// cleared (see inflight.Ledger.Clearance): whether a DELETE of it would be
// allowed now without a read, from its horizon (see WithHorizon), which
// needs every reference to it tracked and no reference in flight. It
// returns the clearance fingerprint under which the decision holds, or
// why it may not be cleared. It decides as a dry run that allows only from
// the horizon: it reads nothing live, records nothing and counts nothing in
// the metrics.
func (v *Validator) Clearance(ctx context.Context, provider logicalcluster.Name, resource schema.GroupVersionResource, raw []byte) (string, string) {
	if v.horizon == nil || !v.readiness.Loaded() {
		return "", "the rules are not loaded"
	}
	ctx = webhook.WithProvider(ctx, provider)
	obj, errResp := webhook.ReadSubject(ctx, raw, "object")
	switch {
	case errResp != nil:
		return "", "its metadata does not read"
	case obj.Terminating || obj.SkipProtection || obj.DeletionRequested:
		return "", "it is being deleted, its deletion is deferred, or it skips protection"
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Delete,
		DryRun:    ptr.To(true),
		Resource:  metav1.GroupVersionResource{Group: resource.Group, Version: resource.Version, Resource: resource.Resource},
		Namespace: obj.Namespace,
		Name:      obj.Name,
		OldObject: runtime.RawExtension{Raw: raw},
	}}
	logger := log.FromContext(ctx).WithValues("resource", resource.GroupResource(), "namespace", obj.Namespace, "name", obj.Name)
	_, d := v.protectAs(ctx, logger, req, obj, true)
	switch {
	case d.clearance != "":
		return d.clearance, ""
	case d.notCleared != "":
		return "", d.notCleared
	default:
		return "", fmt.Sprintf("its DELETE would be %s (via %s)", d.outcome, cmp.Or(d.via, "none"))
	}
}

// WarmClearance prepares the decision of the clearance of obj, an object
// of resource served by the workspace of provider, that is not due yet:
// it starts the probe of the guard of its ledger on its shard, if that is
// not known (see horizon.Judge.Warm), so that its horizon does not begin
// only once it is due. It reports whether nothing is left to prepare (the
// guard's activation is known, or nothing protects the resource).
func (v *Validator) WarmClearance(ctx context.Context, provider logicalcluster.Name, resource schema.GroupVersionResource, obj kcp.Meta) bool {
	if v.horizon == nil {
		return true
	}
	entries := v.rules.Find(registry.Target{Cluster: provider, Resource: resource.GroupResource()})
	if len(entries) == 0 {
		return true
	}
	return v.horizon.Warm(webhook.WithProvider(ctx, provider), entries[0].Target, obj)
}

// ClearanceFingerprint returns the clearance fingerprint of the objects of
// target (a protected resource as its provider serves it) under the rules
// the webhook holds now, and whether they can be cleared at all: every
// dependent type that references them is labelled.
func (v *Validator) ClearanceFingerprint(target index.Source) (string, bool) {
	gr := target.Resource.GroupResource()
	groups := v.groupByDependent(v.rules.Find(registry.Target{Cluster: target.Export.Cluster, Resource: gr}), "")
	if len(groups) == 0 {
		return "", false
	}
	schemes := make([]reflabels.Scheme, len(groups))
	for i, g := range groups {
		if g.scheme == "" {
			return "", false
		}
		schemes[i] = reflabels.Scheme{Fingerprint: g.scheme, Salt: g.salt}
	}
	return reflabels.ClearanceFingerprint(target.Export.Cluster.String(), gr, schemes), true
}

// clearanceFingerprint is the clearance fingerprint of the object of d:
// of its provider, its resource and the schemes of its dependent groups.
func (d *deletion) clearanceFingerprint() string {
	schemes := make([]reflabels.Scheme, len(d.groups))
	for i, g := range d.groups {
		schemes[i] = reflabels.Scheme{Fingerprint: g.scheme, Salt: g.salt}
	}
	return reflabels.ClearanceFingerprint(d.obj.Provider.String(), d.target, schemes)
}
