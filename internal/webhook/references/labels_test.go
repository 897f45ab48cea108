package references

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	evanjsonpatch "github.com/evanphx/json-patch/v5"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/webhooktest"
)

// vmsOfProvider is the VirtualMachines of the provider workspace, as the
// mutator looks up how they are labelled.
var vmsOfProvider = registry.Target{Cluster: provider, Resource: vms.GroupResource()}

// vmLabelScheme is the scheme of the VirtualMachines: they reference VPCs
// at .spec.vpcRef.name and .spec.nics[*].vpc.
func vmLabelScheme(t *testing.T) reflabels.Scheme {
	t.Helper()
	s, reason := reflabels.SchemeOf([]reflabels.Rule{{
		Name: "vm-rule", UID: "uid-vm-rule", Dependent: "compute.io/compute.io/v1/virtualmachines",
		References: []reflabels.Reference{
			{Path: fieldpathtest.MustParse(".spec.vpcRef.name"), Target: vpcs.GroupResource()},
			{Path: fieldpathtest.MustParse(".spec.nics[*].vpc"), Target: vpcs.GroupResource()},
		},
	}})
	if reason != "" || s.Fingerprint == "" {
		t.Fatalf("SchemeOf() = %+v, %q", s, reason)
	}
	return s
}

// fakeLabelling answers how the dependents of a type are labelled, and
// records what it was asked.
type fakeLabelling struct {
	labellings map[registry.Target]registry.Labelling
	asked      []registry.Target
}

func (f *fakeLabelling) Labelling(dependent registry.Target) (registry.Labelling, bool) {
	f.asked = append(f.asked, dependent)
	l, ok := f.labellings[dependent]
	return l, ok
}

// labelObject is the JSON of a VirtualMachine in the consumer workspace
// with labels (none if nil) and spec.
func labelObject(t *testing.T, labels map[string]string, spec map[string]any) []byte {
	t.Helper()
	meta := map[string]any{"name": "vm-1", "namespace": "default", "annotations": map[string]any{logicalcluster.AnnotationKey: consumer.String(), "note": "keep"}}
	if labels != nil {
		meta["labels"] = labels
	}
	raw, err := json.Marshal(map[string]any{"apiVersion": "compute.io/v1", "kind": "VirtualMachine", "metadata": meta, "spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// labelRequest is a write of vm-1 with op; an UPDATE's old object has
// oldLabels.
func labelRequest(t *testing.T, op admissionv1.Operation, labels, oldLabels map[string]string, spec map[string]any) admission.Request {
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "req-1",
		Operation: op,
		Kind:      metav1.GroupVersionKind{Group: "compute.io", Version: "v1", Kind: "VirtualMachine"},
		Resource:  metav1.GroupVersionResource{Group: vms.Group, Version: vms.Version, Resource: vms.Resource},
		Name:      "vm-1", Namespace: "default",
		Object: runtime.RawExtension{Raw: labelObject(t, labels, spec)},
	}}
	switch op {
	case admissionv1.Update:
		req.OldObject = runtime.RawExtension{Raw: labelObject(t, oldLabels, spec)}
	case admissionv1.Delete:
		req.OldObject, req.Object = req.Object, runtime.RawExtension{}
	}
	return req
}

// withLabelsJSON returns req with the labels of its object replaced by the
// JSON labels (null, {}).
func withLabelsJSON(t *testing.T, req admission.Request, labels string) admission.Request {
	t.Helper()
	return withMetadataJSON(t, req, "labels", labels)
}

// withMetadataJSON returns req with the metadata field of its object
// replaced by the JSON value, or removed if value is "".
func withMetadataJSON(t *testing.T, req admission.Request, field, value string) admission.Request {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	meta := obj["metadata"].(map[string]any)
	if value == "" {
		delete(meta, field)
	} else {
		var v any
		if err := json.Unmarshal([]byte(value), &v); err != nil {
			t.Fatal(err)
		}
		meta[field] = v
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	req.Object.Raw = raw
	return req
}

// applyPatches applies the patches of resp to raw with
// github.com/evanphx/json-patch/v5, checks that nothing but the labels
// changed, and returns the labels after.
func applyPatches(t *testing.T, raw []byte, resp admission.Response) map[string]string {
	t.Helper()
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := evanjsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatalf("the patches %s are not a JSON patch: %v", ops, err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s to %s: %v", ops, raw, err)
	}
	var before, after map[string]any
	if err := json.Unmarshal(raw, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(patched, &after); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	if l, ok := after["metadata"].(map[string]any)["labels"].(map[string]any); ok {
		for k, v := range l {
			s, isString := v.(string)
			if !isString {
				t.Errorf("label %s = %v, not a string", k, v)
			}
			labels[k] = s
		}
	}
	delete(before["metadata"].(map[string]any), "labels")
	delete(after["metadata"].(map[string]any), "labels")
	if b, a := fmt.Sprint(before), fmt.Sprint(after); b != a {
		t.Errorf("the patch changed more than the labels:\n  before %s\n  after  %s", b, a)
	}
	return labels
}

func TestLabelMutator(t *testing.T) {
	scheme := vmLabelScheme(t)
	fp := scheme.Fingerprint
	keyA, keyB := reflabels.Key(vpcs.GroupResource(), "vpc-a"), reflabels.Key(vpcs.GroupResource(), "vpc-b")
	keyZ := reflabels.Key(vpcs.GroupResource(), "vpc-z")
	vmSource := index.Source{Export: kcp.ObjectKey{Cluster: provider, Name: "compute.io"}, Resource: vms}
	labellable := map[registry.Target]registry.Labelling{vmsOfProvider: {Dependent: vmSource, Scheme: scheme, Labellable: true}}
	refsAB := map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "nics": []any{map[string]any{"vpc": "vpc-b"}, map[string]any{"vpc": "vpc-a"}}}
	refsA := map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}
	// correct are the labels of an object with refsA under the scheme.
	correct := map[string]string{"app": "web", keyA: "", depv1alpha1.LabelReferencesScheme: fp}
	without := func(labels map[string]string, keys ...string) map[string]string {
		out := maps.Clone(labels)
		for _, k := range keys {
			delete(out, k)
		}
		return out
	}
	with := func(labels map[string]string, kv ...string) map[string]string {
		out := maps.Clone(labels)
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	tests := []struct {
		name       string
		req        admission.Request
		labellings map[registry.Target]registry.Labelling
		// urlScheme is the scheme in the URL of the configuration that
		// called; "-" for a context without an endpoint.
		urlScheme string
		notLoaded bool
		// provider is the provider workspace that called, if not
		// "provider".
		provider logicalcluster.Name

		wantAllowed bool
		wantCode    int32
		wantMessage string
		// wantLabels are the labels after the patch; nil: no patch.
		wantLabels map[string]string
		wantResult string
	}{
		{
			name:        "a CREATE gets a reference label per referenced object and the scheme label",
			req:         labelRequest(t, admissionv1.Create, nil, nil, refsAB),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{keyA: "", keyB: "", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "a CREATE keeps the labels of other keys",
			req:         labelRequest(t, admissionv1.Create, map[string]string{"app": "web", "ref.example.com/x": "y"}, nil, refsAB),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{"app": "web", "ref.example.com/x": "y", keyA: "", keyB: "", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "a CREATE without references is labelled with the scheme only",
			req:         labelRequest(t, admissionv1.Create, map[string]string{"app": "web"}, nil, map[string]any{"cpu": 2}),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{"app": "web", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "an UPDATE that strips the labels gets them back",
			req:         labelRequest(t, admissionv1.Update, map[string]string{"app": "web"}, correct, refsA),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  correct,
			wantResult:  LabelsChanged,
		},
		{
			name: "an UPDATE that forges labels gets them recomputed: forged reference labels removed, the scheme label replaced",
			req: labelRequest(t, admissionv1.Update,
				with(correct, depv1alpha1.LabelReferencePrefix+"forged", "", keyZ, "", depv1alpha1.LabelReferencesScheme, "forged-scheme", keyA, "x"),
				correct, refsA),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  correct,
			wantResult:  LabelsChanged,
		},
		{
			name:        "an UPDATE whose labels are right is allowed without a patch",
			req:         labelRequest(t, admissionv1.Update, correct, correct, refsA),
			labellings:  labellable,
			wantAllowed: true,
			wantResult:  LabelsUnchanged,
		},
		{
			name:        "a configuration made for another scheme labels the references but not the scheme",
			req:         labelRequest(t, admissionv1.Create, map[string]string{"app": "web"}, nil, refsAB),
			labellings:  labellable,
			urlScheme:   "older-scheme",
			wantAllowed: true,
			wantLabels:  map[string]string{"app": "web", keyA: "", keyB: ""},
			wantResult:  LabelsUnvouched,
		},
		{
			name:        "a configuration made for another scheme removes a scheme label the object carries",
			req:         labelRequest(t, admissionv1.Update, with(correct, keyZ, ""), correct, refsA),
			labellings:  labellable,
			urlScheme:   "older-scheme",
			wantAllowed: true,
			wantLabels:  without(correct, depv1alpha1.LabelReferencesScheme),
			wantResult:  LabelsUnvouched,
		},
		{
			name:        "a configuration made for another scheme, labels already right for it: no patch, still unvouched",
			req:         labelRequest(t, admissionv1.Update, without(correct, depv1alpha1.LabelReferencesScheme), correct, refsA),
			labellings:  labellable,
			urlScheme:   "older-scheme",
			wantAllowed: true,
			wantResult:  LabelsUnvouched,
		},
		{
			name:        "a request that names no scheme does not vouch",
			req:         labelRequest(t, admissionv1.Create, nil, nil, refsA),
			labellings:  labellable,
			urlScheme:   "-",
			wantAllowed: true,
			wantLabels:  map[string]string{keyA: ""},
			wantResult:  LabelsUnvouched,
		},
		{
			name: "a type that cannot be labelled loses every managed label",
			req:  labelRequest(t, admissionv1.Update, with(correct, keyZ, ""), correct, refsA),
			labellings: map[registry.Target]registry.Labelling{vmsOfProvider: {
				Labellable: false, Reason: "the rule vm-rule reads the reference .status.vpc in the status",
			}},
			wantAllowed: true,
			wantLabels:  map[string]string{"app": "web"},
			wantResult:  LabelsChanged,
		},
		{
			name:        "a type no rule names loses every managed label",
			req:         labelRequest(t, admissionv1.Update, correct, correct, refsA),
			labellings:  map[registry.Target]registry.Labelling{},
			wantAllowed: true,
			wantLabels:  map[string]string{"app": "web"},
			wantResult:  LabelsChanged,
		},
		{
			name: "another provider's scheme for a type of the same name does not apply",
			req:  labelRequest(t, admissionv1.Create, map[string]string{keyA: ""}, nil, refsA),
			labellings: map[registry.Target]registry.Labelling{
				{Cluster: "other-provider", Resource: vms.GroupResource()}: {Dependent: vmSource, Scheme: scheme, Labellable: true},
			},
			wantAllowed: true,
			wantLabels:  map[string]string{},
			wantResult:  LabelsChanged,
		},
		{
			name:     "the scheme of the provider workspace that called applies",
			req:      labelRequest(t, admissionv1.Create, nil, nil, refsA),
			provider: "other-provider",
			labellings: map[registry.Target]registry.Labelling{
				{Cluster: "other-provider", Resource: vms.GroupResource()}: {Dependent: vmSource, Scheme: scheme, Labellable: true},
			},
			wantAllowed: true,
			wantLabels:  map[string]string{keyA: "", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "a type no rule names, without managed labels: no patch",
			req:         labelRequest(t, admissionv1.Create, map[string]string{"app": "web"}, nil, refsA),
			labellings:  map[registry.Target]registry.Labelling{},
			wantAllowed: true,
			wantResult:  LabelsUnchanged,
		},
		{
			name:        "a CREATE with null labels (as a server-side apply leaves them) is labelled",
			req:         withLabelsJSON(t, labelRequest(t, admissionv1.Create, nil, nil, refsA), "null"),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{keyA: "", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "an UPDATE to null labels gets the managed ones back",
			req:         withLabelsJSON(t, labelRequest(t, admissionv1.Update, nil, correct, refsA), "null"),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{keyA: "", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "an UPDATE to empty labels gets the managed ones back",
			req:         withLabelsJSON(t, labelRequest(t, admissionv1.Update, nil, correct, refsA), "{}"),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{keyA: "", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "an UPDATE whose server-side apply dropped every annotation, kcp.io/cluster included, is labelled in the old object's workspace",
			req:         withMetadataJSON(t, withLabelsJSON(t, labelRequest(t, admissionv1.Update, nil, correct, refsA), "null"), "annotations", ""),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{keyA: "", depv1alpha1.LabelReferencesScheme: fp},
			wantResult:  LabelsChanged,
		},
		{
			name:        "a type no rule names, null labels: no patch",
			req:         withLabelsJSON(t, labelRequest(t, admissionv1.Update, nil, correct, refsA), "null"),
			labellings:  map[registry.Target]registry.Labelling{},
			wantAllowed: true,
			wantResult:  LabelsUnchanged,
		},
		{
			name: "an object with more references than MaxReferences gets no reference labels, and the scheme label that says so",
			req: func() admission.Request {
				var nics []any
				for i := range reflabels.MaxReferences + 1 {
					nics = append(nics, map[string]any{"vpc": fmt.Sprintf("vpc-%d", i)})
				}
				return labelRequest(t, admissionv1.Update, correct, correct, map[string]any{"nics": nics})
			}(),
			labellings:  labellable,
			wantAllowed: true,
			wantLabels:  map[string]string{"app": "web", depv1alpha1.LabelReferencesScheme: reflabels.TooMany(vmLabelScheme(t).Fingerprint)},
			wantResult:  LabelsChanged,
		},
		{
			name: "a write of a subresource is allowed without a patch",
			req: func() admission.Request {
				r := labelRequest(t, admissionv1.Update, map[string]string{keyZ: "", depv1alpha1.LabelReferencesScheme: "forged"}, nil, refsA)
				r.SubResource = "status"
				return r
			}(),
			labellings:  labellable,
			wantAllowed: true,
			wantResult:  LabelsUnchanged,
		},
		{
			name:        "a DELETE is allowed without a patch",
			req:         labelRequest(t, admissionv1.Delete, map[string]string{keyZ: ""}, nil, refsA),
			labellings:  labellable,
			wantAllowed: true,
			wantResult:  LabelsUnchanged,
		},
		{
			name:        "before the rules are loaded, writes are refused with a retry",
			req:         labelRequest(t, admissionv1.Create, nil, nil, refsA),
			labellings:  labellable,
			notLoaded:   true,
			wantCode:    http.StatusServiceUnavailable,
			wantMessage: "retry",
			wantResult:  webhook.DecisionError,
		},
		{
			name: "an object that is not JSON is a bad request",
			req: func() admission.Request {
				r := labelRequest(t, admissionv1.Create, nil, nil, refsA)
				r.Object.Raw = []byte(`{"metadata": [`)
				return r
			}(),
			labellings:  labellable,
			wantCode:    http.StatusBadRequest,
			wantMessage: "failed to decode object",
			wantResult:  webhook.DecisionError,
		},
		{
			name: "a request without an object is a bad request",
			req: func() admission.Request {
				r := labelRequest(t, admissionv1.Create, nil, nil, refsA)
				r.Object.Raw = nil
				return r
			}(),
			labellings:  labellable,
			wantCode:    http.StatusBadRequest,
			wantMessage: "no object",
			wantResult:  webhook.DecisionError,
		},
		{
			name: "an object without the kcp.io/cluster annotation is a bad request",
			req: func() admission.Request {
				r := labelRequest(t, admissionv1.Create, nil, nil, refsA)
				r.Object.Raw = []byte(`{"metadata":{"name":"vm-1"},"spec":{"vpcRef":{"name":"vpc-a"}}}`)
				return r
			}(),
			labellings:  labellable,
			wantCode:    http.StatusBadRequest,
			wantMessage: logicalcluster.AnnotationKey,
			wantResult:  webhook.DecisionError,
		},
		{
			name: "labels that are not a map of strings are a bad request",
			req: func() admission.Request {
				r := labelRequest(t, admissionv1.Create, nil, nil, refsA)
				r.Object.Raw = []byte(`{"metadata":{"name":"vm-1","annotations":{"kcp.io/cluster":"consumer"},"labels":["x"]},"spec":{"vpcRef":{"name":"vpc-a"}}}`)
				return r
			}(),
			labellings:  labellable,
			wantCode:    http.StatusBadRequest,
			wantMessage: "labels",
			wantResult:  webhook.DecisionError,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			finder := &fakeLabelling{labellings: tt.labellings}
			m := webhook.NewMetrics()
			mut := NewLabelMutator(finder, loaded(!tt.notLoaded), m)
			from := provider
			if tt.provider != "" {
				from = tt.provider
			}
			ctx := webhook.WithProvider(context.Background(), from)
			switch tt.urlScheme {
			case "":
				ctx = webhook.WithEndpoint(ctx, webhook.EndpointLabels, fp)
			case "-":
			default:
				ctx = webhook.WithEndpoint(ctx, webhook.EndpointLabels, tt.urlScheme)
			}
			resp := mut.Handle(ctx, tt.req)

			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if !tt.wantAllowed {
				if resp.Result == nil || resp.Result.Code != tt.wantCode || !strings.Contains(resp.Result.Message, tt.wantMessage) {
					t.Errorf("result = %+v, want code %d and a message containing %q", resp.Result, tt.wantCode, tt.wantMessage)
				}
				if len(resp.Patches) != 0 {
					t.Errorf("a refusal patches: %v", resp.Patches)
				}
			}
			switch {
			case tt.wantLabels == nil && len(resp.Patches) != 0:
				t.Errorf("patches %v, want none", resp.Patches)
			case tt.wantLabels != nil && len(resp.Patches) == 0:
				t.Errorf("no patch, want labels %v", tt.wantLabels)
			case tt.wantLabels != nil:
				if got := applyPatches(t, tt.req.Object.Raw, resp); !maps.Equal(got, tt.wantLabels) {
					t.Errorf("labels after the patch = %v, want %v", got, tt.wantLabels)
				}
			}
			got, n := webhooktest.MetricValue(t, m, "dependency_webhook_labels_total", "result", tt.wantResult)
			if got != 1 {
				t.Errorf("dependency_webhook_labels_total{result=%q} = %v, want 1", tt.wantResult, got)
			}
			if n != 1 {
				t.Errorf("dependency_webhook_labels_total has %d series, want only result=%q", n, tt.wantResult)
			}
			if tt.wantResult != webhook.DecisionError && tt.req.SubResource == "" && tt.req.Operation != admissionv1.Delete {
				if want := (registry.Target{Cluster: from, Resource: vms.GroupResource()}); len(finder.asked) != 1 || finder.asked[0] != want {
					t.Errorf("asked for the labelling of %v, want once of %v", finder.asked, want)
				}
			}
		})
	}
}

// The labels the mutator sets are those the scheme computes (the labels
// the DELETE path selects by), and a second pass over the patched object
// changes nothing: kcp calls the webhook again after later mutations.
func TestLabelMutatorIsIdempotent(t *testing.T) {
	scheme := vmLabelScheme(t)
	finder := &fakeLabelling{labellings: map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: scheme, Labellable: true}}}
	mut := NewLabelMutator(finder, loaded(true), nil)
	ctx := webhook.WithEndpoint(webhook.WithProvider(context.Background(), provider), webhook.EndpointLabels, scheme.Fingerprint)
	spec := map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "nics": []any{map[string]any{"vpc": "vpc-c"}}}
	req := labelRequest(t, admissionv1.Create, map[string]string{depv1alpha1.LabelReferencePrefix + "stale": ""}, nil, spec)
	resp := mut.Handle(ctx, req)
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("first pass: allowed %v, patches %v", resp.Allowed, resp.Patches)
	}
	labels := applyPatches(t, req.Object.Raw, resp)
	want, err := scheme.Labels(req.Object.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(labels, want) {
		t.Errorf("labels = %v, want what the scheme computes, %v", labels, want)
	}
	again := labelRequest(t, admissionv1.Update, labels, labels, spec)
	if resp := mut.Handle(ctx, again); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("second pass: allowed %v, patches %v; want no patch", resp.Allowed, resp.Patches)
	}
}

// The mutator answers the webhook's own probes (see package tracking,
// KindLabelling): a dry run of the webhook's user that sets the scheme
// label to a probe's value gets the answer signed for the scheme it vouches
// for; any other write gets none.
func TestLabelMutatorAnswersProbes(t *testing.T) {
	scheme := vmLabelScheme(t)
	answers := tracking.NewAnswers(func() [][]byte { return [][]byte{[]byte("secret")} })
	const value = tracking.ProbeValuePrefix + "abcdefgh"
	spec := map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}
	request := func(user string, dryRun bool, label string) admission.Request {
		req := labelRequest(t, admissionv1.Update, map[string]string{depv1alpha1.LabelReferencesScheme: label}, nil, spec)
		req.UserInfo.Username, req.DryRun = user, &dryRun
		return req
	}
	tests := []struct {
		name      string
		req       admission.Request
		urlScheme string
		self      Self
		want      string
	}{
		{"the webhook's dry run of a probe's value", request("dependency-webhook", true, value), scheme.Fingerprint, fakeSelf{}, answers.Sign(tracking.KindLabelling, value, scheme.Fingerprint)},
		{"another user's", request("tenant", true, value), scheme.Fingerprint, fakeSelf{}, ""},
		{"not a dry run", request("dependency-webhook", false, value), scheme.Fingerprint, fakeSelf{}, ""},
		{"another value", request("dependency-webhook", true, "s0"), scheme.Fingerprint, fakeSelf{}, ""},
		{"a configuration of another scheme (the mutator vouches for none)", request("dependency-webhook", true, value), "0000000000000000", fakeSelf{}, ""},
		{"the webhook's identity unknown", request("dependency-webhook", true, value), scheme.Fingerprint, fakeSelf{err: errors.New("no review")}, ""},
		{"without probes", request("dependency-webhook", true, value), scheme.Fingerprint, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			finder := &fakeLabelling{labellings: map[registry.Target]registry.Labelling{vmsOfProvider: {Scheme: scheme, Labellable: true}}}
			var opts []LabelOption
			if tt.self != nil {
				opts = append(opts, WithLabellingProbes(&webhook.Prober{Self: tt.self, Answers: answers}))
			}
			m := webhook.NewMetrics()
			mut := NewLabelMutator(finder, loaded(true), m, opts...)
			ctx := webhook.WithEndpoint(webhook.WithProvider(context.Background(), provider), webhook.EndpointLabels, tt.urlScheme)
			resp := mut.Handle(ctx, tt.req)
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			// An answered probe is no dependent's write: the metric leaves
			// it out, and counts every other write.
			wantResult, wantSeries := LabelsChanged, 1
			switch {
			case tt.want != "":
				wantSeries = 0
			case tt.urlScheme != scheme.Fingerprint:
				wantResult = LabelsUnvouched
			}
			if got, n := webhooktest.MetricValue(t, m, "dependency_webhook_labels_total", "result", wantResult); n != wantSeries || wantSeries == 1 && got != 1 {
				t.Errorf("dependency_webhook_labels_total has %d series, {result=%q} = %v; want %d series (a probe's none)", n, wantResult, got, wantSeries)
			}
			ops, err := json.Marshal(resp.Patches)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := evanjsonpatch.DecodePatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := patch.Apply(tt.req.Object.Raw)
			if err != nil {
				t.Fatalf("applying %s: %v", ops, err)
			}
			var got struct {
				Metadata struct {
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patched, &got); err != nil {
				t.Fatal(err)
			}
			if a := got.Metadata.Annotations[depv1alpha1.AnnotationProbeAnswer]; a != tt.want {
				t.Errorf("answer %q, want %q", a, tt.want)
			}
			if got.Metadata.Annotations["note"] != "keep" {
				t.Errorf("the other annotations were lost: %v", got.Metadata.Annotations)
			}
			if l := got.Metadata.Labels[depv1alpha1.LabelReferencesScheme]; tt.urlScheme == scheme.Fingerprint && l != scheme.Fingerprint {
				t.Errorf("scheme label %q, want %q", l, scheme.Fingerprint)
			}
		})
	}
}
