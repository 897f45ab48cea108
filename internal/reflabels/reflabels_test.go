package reflabels

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	evanjsonpatch "github.com/evanphx/json-patch/v5"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
)

var (
	vpcs     = schema.GroupResource{Group: "networking.example.com", Resource: "vpcs"}
	subnets  = schema.GroupResource{Group: "networking.example.com", Resource: "subnets"}
	gateways = schema.GroupResource{Group: "gateway.networking.k8s.io", Resource: "gateways"}
	secrets  = schema.GroupResource{Resource: "secrets"}
)

var keyPattern = regexp.MustCompile(`^` + regexp.QuoteMeta(depv1alpha1.LabelReferencePrefix) + `[0-9a-f]{40}$`)

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target schema.GroupResource
		ref    string
	}{
		{"named group", vpcs, "vpc-1"},
		{"core group", secrets, "db-password"},
		{"empty name", vpcs, ""},
		{"longest name", vpcs, strings.Repeat("a", 253)},
		{"unicode name", vpcs, "vpc-ä"},
		{"name with slashes", vpcs, "a/b/c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := Key(tc.target, tc.ref)
			if !strings.HasPrefix(k, depv1alpha1.LabelReferencePrefix) {
				t.Errorf("Key = %q, want the prefix %q", k, depv1alpha1.LabelReferencePrefix)
			}
			if !keyPattern.MatchString(k) {
				t.Errorf("Key = %q, want the prefix and 40 lower-case hex digits", k)
			}
			if errs := validation.IsQualifiedName(k); len(errs) != 0 {
				t.Errorf("Key = %q is not a valid label key: %v", k, errs)
			}
			if !Managed(k) {
				t.Errorf("Key = %q is not managed", k)
			}
			if again := Key(tc.target, tc.ref); again != k {
				t.Errorf("Key is not deterministic: %q, then %q", k, again)
			}
			// Keys are stored on objects: their derivation must not change.
			sum := sha256.Sum256([]byte(tc.target.Group + "/" + tc.target.Resource + "/" + tc.ref))
			if want := depv1alpha1.LabelReferencePrefix + hex.EncodeToString(sum[:])[:40]; k != want {
				t.Errorf("Key = %q, want %q", k, want)
			}
		})
	}

	t.Run("differs by group, resource and name", func(t *testing.T) {
		keys := map[string]string{}
		for _, c := range []struct {
			target schema.GroupResource
			name   string
		}{
			{vpcs, "vpc-1"},
			{vpcs, "vpc-2"},
			{vpcs, "VPC-1"},
			{subnets, "vpc-1"},
			{schema.GroupResource{Group: "other.example.com", Resource: "vpcs"}, "vpc-1"},
			{schema.GroupResource{Resource: "vpcs"}, "vpc-1"},
			{schema.GroupResource{Group: "networking.example.com", Resource: "vpcsv"}, "pc-1"},
			{schema.GroupResource{Group: "networking.example.comv", Resource: "pcs"}, "vpc-1"},
		} {
			k := Key(c.target, c.name)
			what := fmt.Sprintf("%s %q", c.target, c.name)
			if prev, dup := keys[k]; dup {
				t.Errorf("%s and %s have the same key %q", prev, what, k)
			}
			keys[k] = what
		}
	})
}

func TestManaged(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{depv1alpha1.LabelReferencesScheme, true},
		{depv1alpha1.LabelAdmission, true},
		{Key(vpcs, "vpc-1"), true},
		{depv1alpha1.LabelReferencePrefix + "anything", true},
		{depv1alpha1.LabelReferencePrefix, true},
		{"app", false},
		{"app.kubernetes.io/name", false},
		{"ref.dependencies.opendefense.cloud", false},
		{"xref.dependencies.opendefense.cloud/abc", false},
		{"dependencies.opendefense.cloud/references-2", false},
		{"dependencies.opendefense.cloud/other", false},
		{depv1alpha1.LabelDeletionRequested, false},
		{"", false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if got := Managed(tc.key); got != tc.want {
				t.Errorf("Managed(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}

func TestStaleSelector(t *testing.T) {
	fp := NewScheme([]types.UID{"rule-1"}, []Reference{{Path: fieldpathtest.MustParse(".spec.vpcRef.name"), Target: vpcs}}).Fingerprint
	s := StaleSelector(fp)
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatalf("StaleSelector(%q) = %q does not parse: %v", fp, s, err)
	}
	for _, tc := range []struct {
		name   string
		labels labels.Set
		want   bool
	}{
		{"no labels", nil, true},
		{"other labels only", labels.Set{"app": "web", Key(vpcs, "vpc-1"): ""}, true},
		{"another scheme", labels.Set{depv1alpha1.LabelReferencesScheme: "0123456789abcdef"}, true},
		{"empty scheme", labels.Set{depv1alpha1.LabelReferencesScheme: ""}, true},
		{"the scheme", labels.Set{depv1alpha1.LabelReferencesScheme: fp}, false},
		{"the scheme and other labels", labels.Set{depv1alpha1.LabelReferencesScheme: fp, "app": "web", Key(vpcs, "vpc-1"): ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sel.Matches(tc.labels); got != tc.want {
				t.Errorf("%q matches %v: %v, want %v", s, tc.labels, got, tc.want)
			}
		})
	}
}

func mustReference(t *testing.T, spec fieldpath.ReferenceSpec) fieldpath.Reference {
	t.Helper()
	r, err := fieldpath.ParseReference(spec)
	if err != nil {
		t.Fatalf("ParseReference(%+v): %v", spec, err)
	}
	return r
}

func TestNewScheme(t *testing.T) {
	vpcRef := Reference{Path: fieldpathtest.MustParse(".spec.vpcRef.name"), Target: vpcs}
	subnetRefs := Reference{Path: fieldpathtest.MustParse(".spec.subnets[*].name"), Target: subnets}
	secretRef := Reference{Path: fieldpathtest.MustParse(".spec.secretName"), Target: secrets}
	gatewayRef := Reference{Path: mustReference(t, fieldpath.ReferenceSpec{
		Path: ".spec.parentRefs[*].name", GroupPath: "group", Group: gateways.Group, KindPath: "kind", Kind: "Gateway",
	}), Target: gateways}
	gatewayRefAnyGroup := Reference{Path: mustReference(t, fieldpath.ReferenceSpec{
		Path: ".spec.parentRefs[*].name", KindPath: "kind", Kind: "Gateway",
	}), Target: gateways}
	gatewayRefWithNamespace := Reference{Path: mustReference(t, fieldpath.ReferenceSpec{
		Path: ".spec.parentRefs[*].name", NamespacePath: "namespace", GroupPath: "group", Group: gateways.Group, KindPath: "kind", Kind: "Gateway",
	}), Target: gateways}
	uids := []types.UID{"uid-1", "uid-2"}
	refs := []Reference{vpcRef, subnetRefs, secretRef, gatewayRef}

	base := NewScheme(uids, refs)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(base.Fingerprint) {
		t.Fatalf("Fingerprint %q is not 16 lower-case hex digits", base.Fingerprint)
	}
	if errs := validation.IsValidLabelValue(base.Fingerprint); len(errs) != 0 {
		t.Fatalf("Fingerprint %q is not a valid label value: %v", base.Fingerprint, errs)
	}
	if !slices.IsSortedFunc(base.References, compareReferences) || len(base.References) != len(refs) {
		t.Errorf("References %v are not the %d references sorted", base.References, len(refs))
	}

	t.Run("stable", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			uids []types.UID
			refs []Reference
		}{
			{"same input", uids, refs},
			{"uids reordered", []types.UID{"uid-2", "uid-1"}, refs},
			{"refs reordered", uids, []Reference{gatewayRef, secretRef, vpcRef, subnetRefs}},
			{"refs reversed", uids, []Reference{gatewayRef, secretRef, subnetRefs, vpcRef}},
			{"duplicate uids", []types.UID{"uid-1", "uid-2", "uid-1", "uid-2"}, refs},
			{"duplicate refs", uids, []Reference{vpcRef, subnetRefs, vpcRef, secretRef, gatewayRef, gatewayRef, subnetRefs}},
			{"everything reordered and duplicated", []types.UID{"uid-2", "uid-2", "uid-1"}, []Reference{secretRef, gatewayRef, vpcRef, secretRef, subnetRefs}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				uidsBefore, refsBefore := slices.Clone(tc.uids), slices.Clone(tc.refs)
				got := NewScheme(tc.uids, tc.refs)
				if got.Fingerprint != base.Fingerprint {
					t.Errorf("Fingerprint %q, want %q", got.Fingerprint, base.Fingerprint)
				}
				if !slices.Equal(got.References, base.References) {
					t.Errorf("References %v, want %v", got.References, base.References)
				}
				if !slices.Equal(tc.uids, uidsBefore) || !slices.Equal(tc.refs, refsBefore) {
					t.Error("NewScheme changed its arguments")
				}
			})
		}
	})

	t.Run("changes", func(t *testing.T) {
		otherPath := Reference{Path: fieldpathtest.MustParse(".spec.vpcRef.id"), Target: vpcs}
		otherTarget := Reference{Path: vpcRef.Path, Target: subnets}
		otherTargetGroup := Reference{Path: vpcRef.Path, Target: schema.GroupResource{Group: "other.example.com", Resource: "vpcs"}}
		otherKind := Reference{Path: mustReference(t, fieldpath.ReferenceSpec{
			Path: ".spec.parentRefs[*].name", GroupPath: "group", Group: gateways.Group, KindPath: "kind", Kind: "ListenerSet",
		}), Target: gateways}
		defaultKind := ""
		otherDefault := Reference{Path: mustReference(t, fieldpath.ReferenceSpec{
			Path: ".spec.parentRefs[*].name", GroupPath: "group", Group: gateways.Group, KindPath: "kind", Kind: "Gateway", DefaultKind: &defaultKind,
		}), Target: gateways}
		fingerprints := map[string]string{base.Fingerprint: "base"}
		for _, tc := range []struct {
			name string
			uids []types.UID
			refs []Reference
		}{
			{"a UID changed", []types.UID{"uid-1", "uid-3"}, refs},
			{"a UID added", []types.UID{"uid-1", "uid-2", "uid-3"}, refs},
			{"a UID removed", []types.UID{"uid-1"}, refs},
			{"no UIDs", nil, refs},
			{"a reference removed", uids, []Reference{vpcRef, subnetRefs, secretRef}},
			{"a reference added", uids, append(slices.Clone(refs), otherPath)},
			{"a path changed", uids, []Reference{otherPath, subnetRefs, secretRef, gatewayRef}},
			{"a target changed", uids, []Reference{otherTarget, subnetRefs, secretRef, gatewayRef}},
			{"a target group changed", uids, []Reference{otherTargetGroup, subnetRefs, secretRef, gatewayRef}},
			{"a kind changed", uids, []Reference{vpcRef, subnetRefs, secretRef, otherKind}},
			{"a default kind set", uids, []Reference{vpcRef, subnetRefs, secretRef, otherDefault}},
			{"a group path removed", uids, []Reference{vpcRef, subnetRefs, secretRef, gatewayRefAnyGroup}},
			{"a namespace path added", uids, []Reference{vpcRef, subnetRefs, secretRef, gatewayRefWithNamespace}},
			{"no references", uids, nil},
			{"nothing", nil, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := NewScheme(tc.uids, tc.refs).Fingerprint
				if prev, dup := fingerprints[got]; dup {
					t.Errorf("Fingerprint %q, the same as %s", got, prev)
				}
				fingerprints[got] = tc.name
			})
		}
	})
}

// want returns the labels of the objects of target with the given names,
// and the scheme label fp.
func want(fp string, refs map[schema.GroupResource][]string) map[string]string {
	m := map[string]string{depv1alpha1.LabelReferencesScheme: fp}
	for target, names := range refs {
		for _, n := range names {
			m[Key(target, n)] = ""
		}
	}
	return m
}

func TestLabels(t *testing.T) {
	vpcRef := Reference{Path: fieldpathtest.MustParse(".spec.vpcRef.name"), Target: vpcs}
	subnetRefs := Reference{Path: fieldpathtest.MustParse(".spec.nics[*].subnetRef.name"), Target: subnets}
	gatewayRefs := Reference{Path: mustReference(t, fieldpath.ReferenceSpec{
		Path: ".spec.parentRefs[*].name", NamespacePath: "namespace",
		GroupPath: "group", Group: gateways.Group, KindPath: "kind", Kind: "Gateway",
	}), Target: gateways}
	emptyDefault := ""
	gatewayRefsExplicitGroup := Reference{Path: mustReference(t, fieldpath.ReferenceSpec{
		Path: ".spec.parentRefs[*].name", GroupPath: "group", Group: gateways.Group, DefaultGroup: &emptyDefault,
	}), Target: gateways}

	for _, tc := range []struct {
		name string
		refs []Reference
		obj  string
		want map[schema.GroupResource][]string
	}{
		{
			name: "plain path",
			refs: []Reference{vpcRef},
			obj:  `{"metadata":{"name":"x"},"spec":{"vpcRef":{"name":"vpc-1"}}}`,
			want: map[schema.GroupResource][]string{vpcs: {"vpc-1"}},
		},
		{
			name: "number as name",
			refs: []Reference{vpcRef},
			obj:  `{"spec":{"vpcRef":{"name":42}}}`,
			want: map[schema.GroupResource][]string{vpcs: {"42"}},
		},
		{
			name: "fan-out",
			refs: []Reference{subnetRefs},
			obj:  `{"spec":{"nics":[{"subnetRef":{"name":"a"}},{"subnetRef":{"name":"b"}},{"subnetRef":{"name":"a"}},{"other":1},{"subnetRef":{}}]}}`,
			want: map[schema.GroupResource][]string{subnets: {"a", "b"}},
		},
		{
			name: "empty names ignored",
			refs: []Reference{vpcRef, subnetRefs},
			obj:  `{"spec":{"vpcRef":{"name":""},"nics":[{"subnetRef":{"name":""}},{"subnetRef":{"name":"b"}}]}}`,
			want: map[schema.GroupResource][]string{subnets: {"b"}},
		},
		{
			name: "non-string values ignored",
			refs: []Reference{vpcRef, subnetRefs},
			obj:  `{"spec":{"vpcRef":{"name":null},"nics":[{"subnetRef":{"name":true}},{"subnetRef":{"name":{"x":"y"}}},{"subnetRef":{"name":["z"]}}]}}`,
			want: nil,
		},
		{
			name: "several references",
			refs: []Reference{vpcRef, subnetRefs},
			obj:  `{"spec":{"vpcRef":{"name":"shared"},"nics":[{"subnetRef":{"name":"shared"}},{"subnetRef":{"name":"b"}}]}}`,
			want: map[schema.GroupResource][]string{vpcs: {"shared"}, subnets: {"shared", "b"}},
		},
		{
			name: "group and kind discriminate",
			refs: []Reference{gatewayRefs},
			obj: `{"spec":{"parentRefs":[
				{"name":"gw-1","group":"gateway.networking.k8s.io","kind":"Gateway"},
				{"name":"gw-2","group":"gateway.networking.k8s.io","kind":"Gateway","namespace":"other"},
				{"name":"svc-1","group":"","kind":"Service"},
				{"name":"ls-1","group":"gateway.networking.k8s.io","kind":"ListenerSet"},
				{"name":"other-1","group":"other.example.com","kind":"Gateway"},
				{"name":"defaulted"},
				"not-an-object"
			]}}`,
			want: map[schema.GroupResource][]string{gateways: {"gw-1", "gw-2", "defaulted"}},
		},
		{
			name: "group with another default",
			refs: []Reference{gatewayRefsExplicitGroup},
			obj:  `{"spec":{"parentRefs":[{"name":"gw-1","group":"gateway.networking.k8s.io"},{"name":"no-group"},{"name":"core","group":""}]}}`,
			want: map[schema.GroupResource][]string{gateways: {"gw-1"}},
		},
		{
			name: "object without the field",
			refs: []Reference{vpcRef, subnetRefs, gatewayRefs},
			obj:  `{"metadata":{"name":"x"},"spec":{"other":"vpc-1"}}`,
			want: nil,
		},
		{
			name: "object without spec",
			refs: []Reference{vpcRef, gatewayRefs},
			obj:  `{"metadata":{"name":"x"}}`,
			want: nil,
		},
		{
			name: "empty object",
			refs: []Reference{vpcRef},
			obj:  `{}`,
			want: nil,
		},
		{
			name: "no references",
			refs: nil,
			obj:  `{"spec":{"vpcRef":{"name":"vpc-1"}}}`,
			want: nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScheme([]types.UID{"rule"}, tc.refs)
			got, err := s.Labels([]byte(tc.obj))
			if err != nil {
				t.Fatalf("Labels: %v", err)
			}
			if w := want(s.Fingerprint, tc.want); !maps.Equal(got, w) {
				t.Errorf("Labels = %v, want %v", got, w)
			}
			for k, v := range got {
				if !Managed(k) {
					t.Errorf("label %q is not managed", k)
				}
				if errs := validation.IsQualifiedName(k); len(errs) != 0 {
					t.Errorf("label key %q is invalid: %v", k, errs)
				}
				if errs := validation.IsValidLabelValue(v); len(errs) != 0 {
					t.Errorf("label value %q is invalid: %v", v, errs)
				}
			}
		})
	}
}

// names returns n distinct names, prefix-0 ...
func names(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// nics returns the JSON of an object whose nics reference the subnets
// named names, and whose vpcRef references vpc (if not empty).
func nics(t *testing.T, vpc string, names []string) []byte {
	t.Helper()
	type ref struct {
		Name string `json:"name"`
	}
	type nic struct {
		SubnetRef ref `json:"subnetRef"`
	}
	spec := map[string]any{}
	var list []nic
	for _, n := range names {
		list = append(list, nic{SubnetRef: ref{Name: n}})
	}
	spec["nics"] = list
	if vpc != "" {
		spec["vpcRef"] = ref{Name: vpc}
	}
	raw, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestLabelsMaxReferences(t *testing.T) {
	vpcRef := Reference{Path: fieldpathtest.MustParse(".spec.vpcRef.name"), Target: vpcs}
	subnetRefs := Reference{Path: fieldpathtest.MustParse(".spec.nics[*].subnetRef.name"), Target: subnets}
	s := NewScheme([]types.UID{"rule"}, []Reference{vpcRef, subnetRefs})
	many := names("subnet", MaxReferences+1)
	for _, tc := range []struct {
		name    string
		obj     []byte
		wantAll bool // else only the scheme label, TooMany
		want    map[schema.GroupResource][]string
	}{
		{"exactly MaxReferences", nics(t, "", many[:MaxReferences]), true, map[schema.GroupResource][]string{subnets: many[:MaxReferences]}},
		{"MaxReferences, duplicated", nics(t, "", append(slices.Clone(many[:MaxReferences]), many[:MaxReferences]...)), true, map[schema.GroupResource][]string{subnets: many[:MaxReferences]}},
		{"MaxReferences and empty names", nics(t, "", append(slices.Clone(many[:MaxReferences]), "", "")), true, map[schema.GroupResource][]string{subnets: many[:MaxReferences]}},
		{"MaxReferences+1 in one path", nics(t, "", many), false, nil},
		{"MaxReferences+1 across two paths", nics(t, "vpc-1", many[:MaxReferences]), false, nil},
		{"MaxReferences across two paths", nics(t, "vpc-1", many[:MaxReferences-1]), true, map[schema.GroupResource][]string{subnets: many[:MaxReferences-1], vpcs: {"vpc-1"}}},
		{"far more", nics(t, "", names("subnet", 10*MaxReferences)), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Labels(tc.obj)
			if err != nil {
				t.Fatalf("Labels: %v", err)
			}
			if !tc.wantAll {
				if w := map[string]string{depv1alpha1.LabelReferencesScheme: TooMany(s.Fingerprint)}; !maps.Equal(got, w) {
					t.Fatalf("Labels = %v, want %v", got, w)
				}
				return
			}
			if w := want(s.Fingerprint, tc.want); !maps.Equal(got, w) {
				t.Errorf("Labels = %d labels, want %d", len(got), len(w))
			}
		})
	}
}

func TestLabelsInvalidJSON(t *testing.T) {
	s := NewScheme([]types.UID{"rule"}, []Reference{
		{Path: fieldpathtest.MustParse(".spec.vpcRef.name"), Target: vpcs},
		{Path: mustReference(t, fieldpath.ReferenceSpec{Path: ".spec.parentRefs[*].name", KindPath: "kind", Kind: "Gateway"}), Target: gateways},
	})
	for _, tc := range []struct {
		name string
		obj  string
	}{
		{"empty", ""},
		{"whitespace", "  "},
		{"not JSON", "not json"},
		{"array", `[{"spec":{"vpcRef":{"name":"vpc-1"}}}]`},
		{"string", `"x"`},
		{"null", `null`},
		{"truncated", `{"spec":{"vpcRef":{"name":"vpc-1"`},
		{"trailing data", `{"spec":{}} {}`},
		{"unterminated string", `{"spec":{"vpcRef":{"name":"vpc-1}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Labels([]byte(tc.obj))
			if err == nil {
				t.Fatalf("Labels(%q) = %v, want an error", tc.obj, got)
			}
			if got != nil {
				t.Errorf("Labels returned %v with the error %v", got, err)
			}
		})
	}
}

// apply applies ops with github.com/evanphx/json-patch/v5 to an object with
// the given labels (none if nil) and returns its labels after.
func apply(t *testing.T, current map[string]string, ops any) map[string]string {
	t.Helper()
	meta := map[string]any{"name": "x", "namespace": "default"}
	if current != nil {
		meta["labels"] = current
	}
	doc, err := json.Marshal(map[string]any{"metadata": meta, "spec": map[string]any{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	rawOps, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := evanjsonpatch.DecodePatch(rawOps)
	if err != nil {
		t.Fatalf("the operations %s are not a JSON patch: %v", rawOps, err)
	}
	patched, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("applying %s to %s: %v", rawOps, doc, err)
	}
	var obj struct {
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec map[string]string `json:"spec"`
	}
	if err := json.Unmarshal(patched, &obj); err != nil {
		t.Fatalf("the patched object %s: %v", patched, err)
	}
	if obj.Metadata.Name != "x" || obj.Spec["a"] != "b" {
		t.Errorf("the patch changed more than the labels: %s", patched)
	}
	return obj.Metadata.Labels
}

func TestPatch(t *testing.T) {
	scheme := depv1alpha1.LabelReferencesScheme
	ref1, ref2, ref3 := Key(vpcs, "vpc-1"), Key(vpcs, "vpc-2"), Key(subnets, "s-1")
	tilde := depv1alpha1.LabelReferencePrefix + "a~b/c~1d~0"

	for _, tc := range []struct {
		name    string
		current map[string]string
		want    map[string]string
		// wantOps are the operations, "op path", in order; nil: none.
		wantOps []string
	}{
		{
			name:    "nil current, nothing wanted",
			current: nil,
			want:    map[string]string{},
			wantOps: nil,
		},
		{
			name:    "nil current and want",
			current: nil,
			want:    nil,
			wantOps: nil,
		},
		{
			name:    "nil current: one add of the whole map",
			current: nil,
			want:    map[string]string{scheme: "fp1", ref1: ""},
			wantOps: []string{"add /metadata/labels"},
		},
		{
			name:    "empty current: one add per key",
			current: map[string]string{},
			want:    map[string]string{scheme: "fp1", ref1: ""},
			wantOps: []string{"add /metadata/labels/dependencies.opendefense.cloud~1references", "add /metadata/labels/" + strings.ReplaceAll(ref1, "/", "~1")},
		},
		{
			name:    "equal",
			current: map[string]string{scheme: "fp1", ref1: "", "app": "web"},
			want:    map[string]string{scheme: "fp1", ref1: ""},
			wantOps: nil,
		},
		{
			name:    "unmanaged labels left alone",
			current: map[string]string{"app": "web", "app.kubernetes.io/name": "x", depv1alpha1.LabelDeletionRequested: "true", "dependencies.opendefense.cloud/other": "y"},
			want:    map[string]string{scheme: "fp1"},
			wantOps: []string{"add /metadata/labels/dependencies.opendefense.cloud~1references"},
		},
		{
			name:    "managed labels not wanted removed",
			current: map[string]string{scheme: "fp1", ref1: "", ref2: "", "app": "web"},
			want:    map[string]string{scheme: "fp1", ref1: ""},
			wantOps: []string{"remove /metadata/labels/" + strings.ReplaceAll(ref2, "/", "~1")},
		},
		{
			name:    "all managed labels removed",
			current: map[string]string{scheme: "fp1", ref1: "", "app": "web"},
			want:    map[string]string{},
			wantOps: []string{"remove /metadata/labels/dependencies.opendefense.cloud~1references", "remove /metadata/labels/" + strings.ReplaceAll(ref1, "/", "~1")},
		},
		{
			name:    "scheme changed, references replaced",
			current: map[string]string{scheme: "fp1", ref1: "", ref2: "", "app": "web"},
			want:    map[string]string{scheme: "fp2", ref2: "", ref3: ""},
			wantOps: []string{
				"remove /metadata/labels/" + strings.ReplaceAll(ref1, "/", "~1"),
				"add /metadata/labels/dependencies.opendefense.cloud~1references",
				"add /metadata/labels/" + strings.ReplaceAll(ref3, "/", "~1"),
			},
		},
		{
			name:    "forged value of a reference label corrected",
			current: map[string]string{scheme: "fp1", ref1: "forged"},
			want:    map[string]string{scheme: "fp1", ref1: ""},
			wantOps: []string{"add /metadata/labels/" + strings.ReplaceAll(ref1, "/", "~1")},
		},
		{
			name:    "tilde and slash escaped, remove",
			current: map[string]string{tilde: "", "app": "web", depv1alpha1.LabelReferencePrefix + "a~b": "decoy"},
			want:    map[string]string{depv1alpha1.LabelReferencePrefix + "a~b": "decoy"},
			wantOps: []string{"remove /metadata/labels/ref.dependencies.opendefense.cloud~1a~0b~1c~01d~00"},
		},
		{
			name:    "tilde and slash escaped, add",
			current: map[string]string{"app": "web", "ref.dependencies.opendefense.cloud/a~1b": "decoy"},
			want:    map[string]string{tilde: "v", "ref.dependencies.opendefense.cloud/a~1b": "decoy"},
			wantOps: []string{"add /metadata/labels/ref.dependencies.opendefense.cloud~1a~0b~1c~01d~00"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := Patch(tc.current, tc.want)
			var got []string
			for _, op := range ops {
				got = append(got, op.Operation+" "+op.Path)
			}
			if !slices.Equal(got, tc.wantOps) {
				t.Errorf("Patch ops = %q, want %q", got, tc.wantOps)
			}
			if len(ops) == 0 {
				if ops != nil {
					t.Errorf("Patch = %v, want nil", ops)
				}
				return
			}

			// The labels after the patch: the unmanaged labels of current,
			// and want.
			expected := map[string]string{}
			for k, v := range tc.current {
				if !Managed(k) {
					expected[k] = v
				}
			}
			maps.Copy(expected, tc.want)
			if after := apply(t, tc.current, ops); !maps.Equal(after, expected) {
				t.Errorf("labels after the patch = %v, want %v", after, expected)
			}
		})
	}

	t.Run("the added map is a copy", func(t *testing.T) {
		w := map[string]string{scheme: "fp1"}
		ops := Patch(nil, w)
		w[scheme] = "changed"
		if v, ok := ops[0].Value.(map[string]string); !ok || v[scheme] != "fp1" {
			t.Errorf("the operation's value %v changed with the wanted map", ops[0].Value)
		}
	})

	t.Run("Labels then Patch converges", func(t *testing.T) {
		s := NewScheme([]types.UID{"rule"}, []Reference{{Path: fieldpathtest.MustParse(".spec.nics[*].subnetRef.name"), Target: subnets}})
		current := map[string]string{"app": "web", ref1: "", scheme: "old"}
		for range 2 {
			w, err := s.Labels(nics(t, "", []string{"s-1", "s-2"}))
			if err != nil {
				t.Fatal(err)
			}
			ops := Patch(current, w)
			if len(ops) == 0 {
				if !maps.Equal(current, map[string]string{"app": "web", scheme: s.Fingerprint, Key(subnets, "s-1"): "", Key(subnets, "s-2"): ""}) {
					t.Fatalf("no operations, but the labels are %v", current)
				}
				return
			}
			current = apply(t, current, ops)
		}
		t.Fatalf("a second Patch still has operations: labels %v", current)
	})
}

// A dependent with too many references for labels is labelled under its
// scheme, and not relabelled; confirming reads still list it in full.
func TestTooMany(t *testing.T) {
	const fp = "0123456789abcdef"
	tests := []struct {
		value                string
		wantLabelled         bool
		wantStale, wantRelab bool
	}{
		{value: fp, wantLabelled: true},
		{value: TooMany(fp), wantLabelled: true, wantStale: true},
		{value: "", wantStale: true, wantRelab: true},
		{value: "fedcba9876543210", wantStale: true, wantRelab: true},
		{value: TooMany("fedcba9876543210"), wantStale: true, wantRelab: true},
		{value: "relabel-abc", wantStale: true, wantRelab: true},
	}
	stale, err := labels.Parse(StaleSelector(fp))
	if err != nil {
		t.Fatal(err)
	}
	unlabelled, err := labels.Parse(UnlabelledSelector(fp))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			if errs := validation.IsValidLabelValue(tt.value); len(errs) > 0 {
				t.Fatalf("not a label value: %v", errs)
			}
			set := labels.Set{}
			if tt.value != "" {
				set[depv1alpha1.LabelReferencesScheme] = tt.value
			}
			if got := LabelledUnder(tt.value, fp); got != tt.wantLabelled {
				t.Errorf("LabelledUnder = %v, want %v", got, tt.wantLabelled)
			}
			if got := stale.Matches(set); got != tt.wantStale {
				t.Errorf("listed by confirming reads: %v, want %v", got, tt.wantStale)
			}
			if got := unlabelled.Matches(set); got != tt.wantRelab {
				t.Errorf("relabelled: %v, want %v", got, tt.wantRelab)
			}
		})
	}
}

func TestNearLimit(t *testing.T) {
	for _, tt := range []struct {
		n, limit int
		want     bool
	}{
		{0, 256, false}, {204, 256, false}, {205, 256, true}, {256, 256, true}, {3000, 256, true},
		{799, 1000, false}, {800, 1000, true}, {5, 0, false},
	} {
		if got := NearLimit(tt.n, tt.limit); got != tt.want {
			t.Errorf("NearLimit(%d, %d) = %v, want %v", tt.n, tt.limit, got, tt.want)
		}
	}
}

// The clearance fingerprint depends on the provider, the target and the
// set of schemes with their salts, not on their order or repetition.
func TestClearanceFingerprint(t *testing.T) {
	vpcs := schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}
	aa, bb, cc := Scheme{Fingerprint: "aa", Salt: "1"}, Scheme{Fingerprint: "bb", Salt: "2"}, Scheme{Fingerprint: "cc", Salt: "3"}
	base := ClearanceFingerprint("p1", vpcs, []Scheme{aa, bb})
	if got := ClearanceFingerprint("p1", vpcs, []Scheme{bb, aa, bb}); got != base {
		t.Errorf("order or repetition changed the fingerprint: %s, %s", got, base)
	}
	for name, other := range map[string]string{
		"provider":    ClearanceFingerprint("p2", vpcs, []Scheme{aa, bb}),
		"target":      ClearanceFingerprint("p1", schema.GroupResource{Group: "network.test.io", Resource: "subnets"}, []Scheme{aa, bb}),
		"scheme gone": ClearanceFingerprint("p1", vpcs, []Scheme{aa}),
		"scheme new":  ClearanceFingerprint("p1", vpcs, []Scheme{aa, bb, cc}),
		"salt":        ClearanceFingerprint("p1", vpcs, []Scheme{aa, {Fingerprint: "bb", Salt: "4"}}),
	} {
		if other == base {
			t.Errorf("a different %s gives the same fingerprint", name)
		}
	}
}

// The salt of a scheme comes from the rules' UIDs alone: rules recreated
// change it, a reference changed does not, and neither does the order.
func TestSchemeSalt(t *testing.T) {
	vpcs := schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}
	ref := func(path string) Reference {
		p, err := fieldpath.ParseReference(fieldpath.ReferenceSpec{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		return Reference{Path: p, Target: vpcs}
	}
	base := NewScheme([]types.UID{"u1", "u2"}, []Reference{ref("spec.vpcRef.name")})
	if base.Salt == "" || strings.Contains(base.Salt, base.Fingerprint) {
		t.Fatalf("salt %q: want one that is not the fingerprint", base.Salt)
	}
	if got := NewScheme([]types.UID{"u2", "u1"}, []Reference{ref("spec.other.name")}); got.Salt != base.Salt || got.Fingerprint == base.Fingerprint {
		t.Errorf("a changed reference: salt %q fingerprint %q, want salt %q and another fingerprint", got.Salt, got.Fingerprint, base.Salt)
	}
	if got := NewScheme([]types.UID{"u1", "u3"}, []Reference{ref("spec.vpcRef.name")}); got.Salt == base.Salt {
		t.Errorf("a recreated rule kept the salt %q", got.Salt)
	}
}

func TestIsClearanceFingerprint(t *testing.T) {
	for s, want := range map[string]bool{
		ClearanceFingerprint("p1", vpcs, []Scheme{{Fingerprint: "aa", Salt: "1"}}): true,
		"0123456789abcdef":  true,
		"0123456789ABCDEF":  false,
		"0123456789abcde":   false,
		"0123456789abcdef0": false,
		"probe-abcdefghij":  false,
		"":                  false,
	} {
		if got := IsClearanceFingerprint(s); got != want {
			t.Errorf("IsClearanceFingerprint(%q) = %v, want %v", s, got, want)
		}
	}
}
