package webhookconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// The match conditions of earlier releases, which errored on null labels
// or annotations: the new ones must decide alike wherever these did not
// error.
const (
	earlierLabelsCondition = `request.operation != 'UPDATE' || ` +
		`has(object.metadata.labels) && object.metadata.labels.exists(k, (k.startsWith("ref.dependencies.opendefense.cloud/") || k == "dependencies.opendefense.cloud/references" || k == "dependencies.opendefense.cloud/admission") && ` +
		`!(has(oldObject.metadata.labels) && k in oldObject.metadata.labels && oldObject.metadata.labels[k] == object.metadata.labels[k])) || ` +
		`has(oldObject.metadata.labels) && oldObject.metadata.labels.exists(k, (k.startsWith("ref.dependencies.opendefense.cloud/") || k == "dependencies.opendefense.cloud/references" || k == "dependencies.opendefense.cloud/admission") && ` +
		`!(has(object.metadata.labels) && k in object.metadata.labels && object.metadata.labels[k] == oldObject.metadata.labels[k])) || ` +
		`["spec"].exists(f, (f in object) != (f in oldObject) || f in object && object[f] != oldObject[f])`
	earlierRecordsCondition = `(has(object.metadata.labels) && "deletion.dependencies.opendefense.cloud/requested" in object.metadata.labels && ` +
		`(request.operation != 'UPDATE' || !(has(oldObject.metadata.labels) && "deletion.dependencies.opendefense.cloud/requested" in oldObject.metadata.labels) || ` +
		`oldObject.metadata.labels["deletion.dependencies.opendefense.cloud/requested"] != object.metadata.labels["deletion.dependencies.opendefense.cloud/requested"])) || ` +
		`(has(object.metadata.annotations) && "deletion.dependencies.opendefense.cloud/request" in object.metadata.annotations && ` +
		`(request.operation != 'UPDATE' || !(has(oldObject.metadata.annotations) && "deletion.dependencies.opendefense.cloud/request" in oldObject.metadata.annotations) || ` +
		`oldObject.metadata.annotations["deletion.dependencies.opendefense.cloud/request"] != object.metadata.annotations["deletion.dependencies.opendefense.cloud/request"]))`
)

// matcher compiles a match condition as kube-apiserver (and so kcp)
// compiles the match conditions of a webhook, with the same CEL
// environment, and evaluates it on a request as admission does.
type matcher struct {
	m matchconditions.Matcher
}

func newMatcher(t *testing.T, expression string) matcher {
	t.Helper()
	compiler := plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	filter := compiler.CompileCondition([]plugincel.ExpressionAccessor{&matchconditions.MatchCondition{Name: "c", Expression: expression}},
		plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions)
	return matcher{matchconditions.NewMatcher(filter, ptr.To(admissionregistrationv1.Fail), "webhook", "admit", "test")}
}

// match evaluates the condition on a request with op by username on
// object and oldObject (nil: none), and returns whether the webhook is
// called, or the error that refuses the request.
func (m matcher) match(op admission.Operation, username string, object, oldObject map[string]any) (bool, error) {
	var obj, old runtime.Object
	if object != nil {
		obj = &unstructured.Unstructured{Object: object}
	}
	if oldObject != nil {
		old = &unstructured.Unstructured{Object: oldObject}
	}
	gvk := schema.GroupVersionKind{Group: "net.io", Version: "v1", Kind: "VPC"}
	attr := admission.NewAttributesRecord(obj, old, gvk, "default", "vpc-a", schema.GroupVersionResource{Group: "net.io", Version: "v1", Resource: "vpcs"},
		"", op, nil, false, &user.DefaultInfo{Name: username})
	result := m.m.Match(context.Background(), &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}, nil, nil)
	return result.Matches, result.Error
}

// metadataShape is one shape of the labels or annotations of an object:
// absent, null, {} or a map.
type metadataShape struct {
	name  string
	value any
	set   bool
}

func shapes(maps ...map[string]any) []metadataShape {
	out := []metadataShape{{name: "absent"}, {name: "null", set: true}, {name: "{}", value: map[string]any{}, set: true}}
	for _, m := range maps {
		raw, _ := json.Marshal(m)
		out = append(out, metadataShape{name: string(raw), value: m, set: true})
	}
	return out
}

// object returns a VPC with labels and annotations of the shapes given,
// and spec.
func object(labels, annotations metadataShape, spec string) map[string]any {
	meta := map[string]any{"name": "vpc-a", "namespace": "default"}
	if labels.set {
		meta["labels"] = cloneValue(labels.value)
	}
	if annotations.set {
		meta["annotations"] = cloneValue(annotations.value)
	}
	return map[string]any{"apiVersion": "net.io/v1", "kind": "VPC", "metadata": meta, "spec": map[string]any{"cidr": spec}}
}

func cloneValue(v any) any {
	if m, ok := v.(map[string]any); ok {
		return maps.Clone(m)
	}
	return v
}

// keyOf returns the key of the metadata field of o, and whether it is
// there (o nil: no object).
func keyOf(o map[string]any, field, key string) (string, bool) {
	if o == nil {
		return "", false
	}
	m, _ := o["metadata"].(map[string]any)[field].(map[string]any)
	v, ok := m[key].(string)
	return v, ok
}

// managedLabels returns the managed labels of o.
func managedLabels(o map[string]any) map[string]string {
	out := map[string]string{}
	m, _ := o["metadata"].(map[string]any)["labels"].(map[string]any)
	for k, v := range m {
		if strings.HasPrefix(k, depv1alpha1.LabelReferencePrefix) || k == depv1alpha1.LabelReferencesScheme || k == depv1alpha1.LabelAdmission {
			out[k] = v.(string)
		}
	}
	return out
}

// differs reports whether the key of field is in exactly one of a and b,
// or in both with different values.
func differs(a, b map[string]any, field, key string) bool {
	va, ina := keyOf(a, field, key)
	vb, inb := keyOf(b, field, key)
	return ina != inb || va != vb
}

// The match conditions the controller writes evaluate without error on
// every shape of labels and annotations kcp admits (absent, null, {}, with
// and without the keys they test), on CREATE (no oldObject), UPDATE and
// DELETE (no object), with kube-apiserver's own CEL environment and
// matcher, and each holds exactly for the requests its documentation
// says. Where the condition of an earlier release evaluated without error,
// the new one decides alike.
func TestConditionsOnEveryShape(t *testing.T) {
	const (
		webhookUser = "dependency-webhook"
		ledger      = "v1 f=0 l=0"
	)
	ref := depv1alpha1.LabelReferencePrefix + "0123"
	labels := shapes(
		map[string]any{ref: ""}, map[string]any{ref: "x"}, map[string]any{depv1alpha1.LabelReferencesScheme: "s1"},
		map[string]any{depv1alpha1.LabelAdmission: "a1", "team": "blue"}, map[string]any{"team": "red"},
		map[string]any{depv1alpha1.LabelDeletionRequested: "true"}, map[string]any{depv1alpha1.LabelDeletionRequested: "yes", ref: ""},
		map[string]any{depv1alpha1.LabelCleared: "0123456789abcdef"}, map[string]any{depv1alpha1.LabelCleared: "fedcba9876543210", "team": "red"},
	)
	annotations := shapes(
		map[string]any{"note": "x"},
		map[string]any{depv1alpha1.AnnotationSkipProtection: "true"}, map[string]any{depv1alpha1.AnnotationSkipProtection: "false"},
		map[string]any{depv1alpha1.AnnotationSkipProtection: "true", depv1alpha1.AnnotationSkipProtectionSetBy: `{"user":"admin"}`},
		map[string]any{depv1alpha1.AnnotationSkipProtectionSetBy: `{"user":"tenant"}`},
		map[string]any{depv1alpha1.AnnotationAdmittedReferences: ledger}, map[string]any{depv1alpha1.AnnotationAdmittedReferences: "probe"},
		map[string]any{depv1alpha1.AnnotationAdmittedReferences: ledger + " c=0123456789abcdef/u1"},
		map[string]any{depv1alpha1.AnnotationDeletionRequest: "r1"}, map[string]any{depv1alpha1.AnnotationDeletionRequest: "r2"},
	)
	var objects []map[string]any
	for _, l := range labels {
		for _, a := range annotations {
			objects = append(objects, object(l, a, "10.0.0.0/16"))
		}
	}
	// A few with another spec, for the conditions on changed fields.
	objects = append(objects, object(labels[0], annotations[0], "10.1.0.0/16"), object(labels[3], annotations[0], "10.1.0.0/16"))

	type condition struct {
		name, expression string
		// earlier is the condition of an earlier release, if it had one.
		earlier string
		// want is whether the webhook is to be called for a CREATE (old
		// nil) or an UPDATE by user.
		want func(op admission.Operation, user string, obj, old map[string]any) bool
		// byUser is set when it depends on the user.
		byUser bool
	}
	specChanged := func(obj, old map[string]any) bool { return !reflect.DeepEqual(obj["spec"], old["spec"]) }
	setOrChanged := func(op admission.Operation, obj, old map[string]any, field, key string) bool {
		_, set := keyOf(obj, field, key)
		return set && (op != admission.Update || differs(obj, old, field, key))
	}
	skip := func(o map[string]any) bool {
		v, _ := keyOf(o, "annotations", depv1alpha1.AnnotationSkipProtection)
		return v == "true"
	}
	conditions := []condition{
		{name: "labels", expression: LabelsCondition([]string{"spec"}), earlier: earlierLabelsCondition,
			want: func(op admission.Operation, _ string, obj, old map[string]any) bool {
				return op != admission.Update || !maps.Equal(managedLabels(obj), managedLabels(old)) || specChanged(obj, old)
			}},
		{name: "records", expression: RecordsCondition(), earlier: earlierRecordsCondition,
			want: func(op admission.Operation, _ string, obj, old map[string]any) bool {
				return setOrChanged(op, obj, old, "labels", depv1alpha1.LabelDeletionRequested) || setOrChanged(op, obj, old, "annotations", depv1alpha1.AnnotationDeletionRequest)
			}},
		{name: "references", expression: ReferencesCondition([]string{"spec"}),
			want: func(op admission.Operation, _ string, obj, old map[string]any) bool {
				return op != admission.Update || specChanged(obj, old)
			}},
		{name: "admitted", expression: AdmittedCondition(),
			want: func(op admission.Operation, _ string, obj, old map[string]any) bool {
				if op == admission.Create {
					_, set := keyOf(obj, "annotations", depv1alpha1.AnnotationAdmittedReferences)
					_, cleared := keyOf(obj, "labels", depv1alpha1.LabelCleared)
					return set || cleared
				}
				return differs(obj, old, "annotations", depv1alpha1.AnnotationAdmittedReferences) || differs(obj, old, "labels", depv1alpha1.LabelCleared)
			}},
		{name: "not the webhook's ledger", expression: NotWebhookLedgerCondition(webhookUser), byUser: true,
			want: func(_ admission.Operation, user string, obj, old map[string]any) bool {
				v, _ := keyOf(obj, "annotations", depv1alpha1.AnnotationAdmittedReferences)
				return user != webhookUser || !strings.HasPrefix(v, "v1 ") || !differs(obj, old, "annotations", depv1alpha1.AnnotationAdmittedReferences)
			}},
		{name: "not the webhook's user", expression: NotUserCondition(webhookUser), byUser: true,
			want: func(_ admission.Operation, user string, _, _ map[string]any) bool { return user != webhookUser }},
		{name: "skip-protection", expression: SkipProtectionCondition(),
			want: func(op admission.Operation, _ string, obj, old map[string]any) bool {
				if op == admission.Create {
					_, recorded := keyOf(obj, "annotations", depv1alpha1.AnnotationSkipProtectionSetBy)
					return skip(obj) || recorded
				}
				return skip(obj) && !skip(old) || differs(obj, old, "annotations", depv1alpha1.AnnotationSkipProtectionSetBy)
			}},
	}
	describe := func(o map[string]any) string {
		if o == nil {
			return "none"
		}
		raw, _ := json.Marshal(o["metadata"])
		return string(raw)
	}
	for _, c := range conditions {
		t.Run(c.name, func(t *testing.T) {
			m := newMatcher(t, c.expression)
			var earlier *matcher
			if c.earlier != "" {
				e := newMatcher(t, c.earlier)
				earlier = &e
			}
			erroredBefore := 0
			check := func(op admission.Operation, user string, obj, old map[string]any) {
				t.Helper()
				got, err := m.match(op, user, obj, old)
				if err != nil {
					t.Fatalf("%s by %s, object %s, oldObject %s: %v", op, user, describe(obj), describe(old), err)
				}
				if op != admission.Delete && got != c.want(op, user, obj, old) {
					t.Errorf("%s by %s, object %s, oldObject %s: called = %v, want %v", op, user, describe(obj), describe(old), got, !got)
				}
				if earlier != nil {
					before, err := earlier.match(op, user, obj, old)
					switch {
					case err != nil:
						erroredBefore++
					case before != got:
						t.Errorf("%s by %s, object %s, oldObject %s: called = %v, the earlier condition %v", op, user, describe(obj), describe(old), got, before)
					}
				}
			}
			users := []string{"alice"}
			if c.byUser {
				users = append(users, webhookUser)
			}
			for _, user := range users {
				for _, obj := range objects {
					check(admission.Create, user, obj, nil)
					check(admission.Delete, user, nil, obj)
					for _, old := range objects {
						check(admission.Update, user, obj, old)
					}
				}
			}
			if earlier != nil && erroredBefore == 0 {
				t.Errorf("the earlier condition never errored: the shapes do not include the null ones")
			}
		})
	}
}

// A condition that iterates over labels with orValue({}) alone errors on
// null labels, which the matcher turns into a refusal: kcp would refuse the
// write (see metadataMapOf).
func TestIterationOverNullLabelsErrors(t *testing.T) {
	m := newMatcher(t, `object.?metadata.?labels.orValue({}).exists(k, k == "a")`)
	null := object(metadataShape{name: "null", set: true}, metadataShape{}, "x")
	if _, err := m.match(admission.Update, "alice", null, null); err == nil || !strings.Contains(err.Error(), "expected iterable type") {
		t.Errorf("error = %v, want one about a null that is not iterable", err)
	}
	safe := newMatcher(t, fmt.Sprintf(`%s.exists(k, k == "a")`, metadataMapOf("object", "labels")))
	if called, err := safe.match(admission.Update, "alice", null, null); err != nil || called {
		t.Errorf("metadataMapOf on null labels: called %v, error %v; want false, nil", called, err)
	}
}

// matchWrite evaluates the condition on a write with op of resource
// (through subresource, "" for none) on object and oldObject (nil: none),
// a dry run or not, and returns whether the webhook is called.
func (m matcher) matchWrite(op admission.Operation, resource schema.GroupVersionResource, subresource string, dryRun bool, object, oldObject map[string]any) (bool, error) {
	var obj, old runtime.Object
	if object != nil {
		obj = &unstructured.Unstructured{Object: object}
	}
	if oldObject != nil {
		old = &unstructured.Unstructured{Object: oldObject}
	}
	gvk := schema.GroupVersionKind{Group: resource.Group, Version: resource.Version, Kind: "Kind"}
	attr := admission.NewAttributesRecord(obj, old, gvk, "default", "vm-a", resource, subresource, op, nil, dryRun, &user.DefaultInfo{Name: "alice"})
	result := m.m.Match(context.Background(), &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}, nil, nil)
	return result.Matches, result.Error
}

// The check of new references is spared a CREATE or UPDATE of a recorded
// type only if it carries an admission id it did not carry before, on
// every shape of labels.
func TestNotRecordedCondition(t *testing.T) {
	key := depv1alpha1.LabelAdmission
	m := newMatcher(t, NotRecordedCondition([]schema.GroupResource{{Resource: "widgets"}, {Group: "compute.io", Resource: "disks"}, {Group: "compute.io", Resource: "virtualmachines"}}))
	vms := schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	id := func(v any) metadataShape { return metadataShape{value: map[string]any{key: v, "app": "x"}, set: true} }
	none := metadataShape{}
	type write struct {
		name        string
		op          admission.Operation
		resource    schema.GroupVersionResource
		subresource string
		dryRun      bool
		labels, old metadataShape
		called      bool
	}
	tests := []write{
		{name: "CREATE with an id", op: admission.Create, resource: vms, labels: id("0123456789abcdef"), called: false},
		{name: "CREATE of the other recorded type", op: admission.Create, resource: schema.GroupVersionResource{Group: "compute.io", Version: "v2", Resource: "disks"}, labels: id("0123456789abcdef"), called: false},
		{name: "CREATE of a recorded type of the core group", op: admission.Create, resource: schema.GroupVersionResource{Version: "v1", Resource: "widgets"}, labels: id("0123456789abcdef"), called: false},
		{name: "CREATE without an id", op: admission.Create, resource: vms, labels: none, called: true},
		{name: "CREATE with an empty id", op: admission.Create, resource: vms, labels: id(""), called: true},
		{name: "CREATE with a null id", op: admission.Create, resource: vms, labels: id(nil), called: true},
		{name: "CREATE of a type not recorded", op: admission.Create, resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "gpus"}, labels: id("0123456789abcdef"), called: true},
		{name: "CREATE of a type of that name in another group", op: admission.Create, resource: schema.GroupVersionResource{Group: "other.io", Version: "v1", Resource: "virtualmachines"}, labels: id("0123456789abcdef"), called: true},
		{name: "UPDATE that sets a new id", op: admission.Update, resource: vms, labels: id("0123456789abcdef"), old: id("fedcba9876543210"), called: false},
		{name: "UPDATE that sets a first id", op: admission.Update, resource: vms, labels: id("0123456789abcdef"), old: none, called: false},
		{name: "UPDATE that keeps the id (recorded nothing)", op: admission.Update, resource: vms, labels: id("0123456789abcdef"), old: id("0123456789abcdef"), called: true},
		{name: "UPDATE that removes the id", op: admission.Update, resource: vms, labels: none, old: id("0123456789abcdef"), called: true},
		{name: "status UPDATE keeps the id", op: admission.Update, resource: vms, subresource: "status", labels: id("0123456789abcdef"), old: id("0123456789abcdef"), called: true},
		{name: "dry-run CREATE (no id: the labelling webhook removed it)", op: admission.Create, resource: vms, dryRun: true, labels: none, called: true},
	}
	for _, s := range shapes(map[string]any{"app": "x"}) {
		tests = append(tests,
			write{name: "CREATE, labels " + s.name, op: admission.Create, resource: vms, labels: s, called: true},
			write{name: "UPDATE with an id, old labels " + s.name, op: admission.Update, resource: vms, labels: id("0123456789abcdef"), old: s, called: false},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var old map[string]any
			if tt.op == admission.Update {
				old = object(tt.old, metadataShape{}, "10.0.0.0/16")
			}
			called, err := m.matchWrite(tt.op, tt.resource, tt.subresource, tt.dryRun, object(tt.labels, metadataShape{}, "10.0.0.0/16"), old)
			if err != nil {
				t.Fatalf("match: %v", err)
			}
			if called != tt.called {
				t.Errorf("webhook called = %v, want %v", called, tt.called)
			}
		})
	}
}
