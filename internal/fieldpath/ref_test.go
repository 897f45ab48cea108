package fieldpath

import (
	"reflect"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

func TestReferenceResolveJSON(t *testing.T) {
	const route = `{"metadata":{"name":"r","namespace":"apps"},"spec":{"parentRefs":[
		{"name":"gw-a"},
		{"name":"gw-b","namespace":"infra"},
		{"name":"gw-c","namespace":""},
		{"name":"svc","kind":"Service","group":""},
		{"name":"gw-d","kind":"Gateway","group":"gateway.example.io","namespace":"edge"},
		{"name":"other","group":"other.example.io"},
		{"name":"gw-e","group":null,"kind":null},
		{"namespace":"nameless"},
		"not-an-object",
		{"name":42}
	]}}`
	gatewayRefs := ReferenceSpec{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace",
		GroupPath: "group", Group: "gateway.example.io", KindPath: "kind", Kind: "Gateway"}
	tests := []struct {
		name string
		spec ReferenceSpec
		data string
		want []Value
	}{
		{
			name: "a path alone finds every name, with no namespace",
			spec: ReferenceSpec{Path: ".spec.parentRefs[*].name"},
			data: route,
			want: []Value{{Name: "gw-a"}, {Name: "gw-b"}, {Name: "gw-c"}, {Name: "svc"}, {Name: "gw-d"}, {Name: "other"}, {Name: "gw-e"}, {Name: "42"}},
		},
		{
			name: "a namespace path reads the namespace next to each name",
			spec: ReferenceSpec{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace"},
			data: route,
			want: []Value{{Name: "gw-a"}, {Name: "gw-b", Namespace: "infra"}, {Name: "gw-c"}, {Name: "svc"}, {Name: "gw-d", Namespace: "edge"}, {Name: "other"}, {Name: "gw-e"}, {Name: "42"}},
		},
		{
			name: "group and kind filters keep the elements naming the kind; a missing field means the default",
			spec: gatewayRefs,
			data: route,
			want: []Value{{Name: "gw-a"}, {Name: "gw-b", Namespace: "infra"}, {Name: "gw-c"}, {Name: "gw-d", Namespace: "edge"}, {Name: "gw-e"}, {Name: "42"}},
		},
		{
			name: "defaults other than the wanted kind and group leave out elements without the fields",
			spec: ReferenceSpec{Path: ".spec.parentRefs[*].name", GroupPath: "group", Group: "", DefaultGroup: ptr("gateway.example.io"),
				KindPath: "kind", Kind: "Service", DefaultKind: ptr("Gateway")},
			data: route,
			want: []Value{{Name: "svc"}},
		},
		{
			name: "a single reference object",
			spec: ReferenceSpec{Path: ".spec.issuerRef.name", KindPath: "kind", Kind: "ClusterIssuer", DefaultKind: ptr("Issuer")},
			data: `{"spec":{"issuerRef":{"name":"letsencrypt","kind":"ClusterIssuer"}}}`,
			want: []Value{{Name: "letsencrypt"}},
		},
		{
			name: "a single reference object of another kind",
			spec: ReferenceSpec{Path: ".spec.issuerRef.name", KindPath: "kind", Kind: "ClusterIssuer", DefaultKind: ptr("Issuer")},
			data: `{"spec":{"issuerRef":{"name":"letsencrypt"}}}`,
		},
		{
			name: "nested sibling paths",
			spec: ReferenceSpec{Path: ".spec.ref.name", NamespacePath: "scope.namespace"},
			data: `{"spec":{"ref":{"name":"db","scope":{"namespace":"data"}}}}`,
			want: []Value{{Name: "db", Namespace: "data"}},
		},
		{
			name: "a name at the root",
			spec: ReferenceSpec{Path: "name", NamespacePath: "namespace"},
			data: `{"name":"x","namespace":"y"}`,
			want: []Value{{Name: "x", Namespace: "y"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseReference(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.ResolveJSON([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ResolveJSON() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReferenceResolveJSONReportsMalformedJSON(t *testing.T) {
	r, err := ParseReference(ReferenceSpec{Path: ".spec.refs[*].name", NamespacePath: "namespace"})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{``, `[]`, `{"spec":{"refs":[{"name":"a","namespace":"\x01"}]}}`, `{"spec":{"refs":[{"name":"a"}]}} x`} {
		if _, err := r.ResolveJSON([]byte(data)); err == nil {
			t.Errorf("ResolveJSON(%q) succeeded", data)
		}
	}
}

func TestParseReference(t *testing.T) {
	tests := []struct {
		spec    ReferenceSpec
		want    string
		wantErr string
	}{
		{spec: ReferenceSpec{Path: "spec.vpcRef.name"}, want: ".spec.vpcRef.name"},
		{spec: ReferenceSpec{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace", GroupPath: "group", Group: "g.io", KindPath: "kind", Kind: "Gateway"},
			want: `.spec.parentRefs[*].name (namespace: namespace, group: group="g.io", kind: kind="Gateway")`},
		{spec: ReferenceSpec{Path: ".spec.backendRefs[*].name", GroupPath: "group", Group: "g.io", DefaultGroup: ptr(""), KindPath: "kind", Kind: "Backend", DefaultKind: ptr("Service")},
			want: `.spec.backendRefs[*].name (group: group="g.io" (missing: ""), kind: kind="Backend" (missing: "Service"))`},
		{spec: ReferenceSpec{Path: ".spec.names[*]", NamespacePath: "namespace"}, wantErr: "must end its path with a field name"},
		{spec: ReferenceSpec{Path: ".spec.ref.name", NamespacePath: ".namespace"}, wantErr: "relative to the object"},
		{spec: ReferenceSpec{Path: ".spec.ref.name", GroupPath: "groups[*]"}, wantErr: "relative to the object"},
		{spec: ReferenceSpec{Path: ".spec.ref.name", KindPath: "kind"}, wantErr: "needs the kind"},
		{spec: ReferenceSpec{Path: ".spec..name"}, wantErr: "empty field name"},
	}
	for _, tt := range tests {
		t.Run(tt.spec.Path, func(t *testing.T) {
			r, err := ParseReference(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseReference() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.String() != tt.want {
				t.Errorf("String() = %s, want %s", r, tt.want)
			}
		})
	}
	a, _ := ParseReference(ReferenceSpec{Path: ".spec.vpcRef.name"})
	if a != PathReference(MustParse("spec.vpcRef.name")) {
		t.Error("a reference of a path alone differs from PathReference")
	}
	b, _ := ParseReference(ReferenceSpec{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace", KindPath: "kind", Kind: "Gateway"})
	if got := b.Paths(); !reflect.DeepEqual(got, []Path{MustParse(".spec.parentRefs[*].name"), MustParse(".spec.parentRefs[*].namespace"), MustParse(".spec.parentRefs[*].kind")}) {
		t.Errorf("Paths() = %v", got)
	}
	if !b.CrossesNamespaces() || a.CrossesNamespaces() {
		t.Error("CrossesNamespaces() is wrong")
	}
}

func TestRefersTo(t *testing.T) {
	tests := []struct {
		ns, dependentNamespace, namespace string
		want                              bool
	}{
		{"", "apps", "apps", true},
		{"", "apps", "infra", false},
		{"infra", "apps", "infra", true},
		{"infra", "apps", "apps", false},
		{"", "", "infra", true}, // a cluster-scoped dependent without a namespace
		{"infra", "", "infra", true},
		{"infra", "", "apps", false},
		{"infra", "apps", "", true}, // a cluster-scoped target
	}
	for _, tt := range tests {
		if got := RefersTo(tt.ns, tt.dependentNamespace, tt.namespace); got != tt.want {
			t.Errorf("RefersTo(%q, %q, %q) = %v, want %v", tt.ns, tt.dependentNamespace, tt.namespace, got, tt.want)
		}
	}
}
