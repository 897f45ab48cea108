package marks

import (
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"
)

func TestFingerprint(t *testing.T) {
	vpcs := schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}
	a := Rule{Cluster: "compute", Name: "vm-refs", UID: "uid-a", Generation: 1}
	b := Rule{Cluster: "storage", Name: "volume-refs", UID: "uid-b", Generation: 3}
	base := Fingerprint("network", vpcs, []Rule{a, b})

	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(base) {
		t.Fatalf("fingerprint %q is not 16 hex digits", base)
	}
	with := func(r Rule, change func(*Rule)) Rule {
		change(&r)
		return r
	}
	tests := []struct {
		name     string
		cluster  string
		resource schema.GroupResource
		rules    []Rule
		same     bool
	}{
		{name: "same rules in another order", cluster: "network", resource: vpcs, rules: []Rule{b, a}, same: true},
		{name: "a duplicate counts once", cluster: "network", resource: vpcs, rules: []Rule{a, b, a}, same: true},
		{name: "a rule's generation changed", cluster: "network", resource: vpcs, rules: []Rule{with(a, func(r *Rule) { r.Generation = 2 }), b}},
		{name: "a rule recreated under its name (new UID)", cluster: "network", resource: vpcs, rules: []Rule{with(a, func(r *Rule) { r.UID = "uid-a2" }), b}},
		{name: "a rule of the same name in another workspace", cluster: "network", resource: vpcs, rules: []Rule{with(a, func(r *Rule) { r.Cluster = "compute2" }), b}},
		{name: "a rule removed", cluster: "network", resource: vpcs, rules: []Rule{a}},
		{name: "a rule added", cluster: "network", resource: vpcs, rules: []Rule{a, b, {Cluster: "x", Name: "y", UID: "z", Generation: 1}}},
		{name: "no rules", cluster: "network", resource: vpcs},
		{name: "another resource", cluster: "network", resource: schema.GroupResource{Group: "network.test.io", Resource: "subnets"}, rules: []Rule{a, b}},
		{name: "another group", cluster: "network", resource: schema.GroupResource{Group: "network2.test.io", Resource: "vpcs"}, rules: []Rule{a, b}},
		{name: "another provider workspace", cluster: "network2", resource: vpcs, rules: []Rule{a, b}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Fingerprint(logicalcluster.Name(tt.cluster), tt.resource, tt.rules)
			if (got == base) != tt.same {
				t.Errorf("Fingerprint = %q, base %q; want same = %v", got, base, tt.same)
			}
		})
	}
}

func TestFingerprintDoesNotReorderItsInput(t *testing.T) {
	rules := []Rule{{Name: "b"}, {Name: "a"}}
	Fingerprint("c", schema.GroupResource{Resource: "r"}, rules)
	if rules[0].Name != "b" {
		t.Errorf("Fingerprint sorted its input: %v", rules)
	}
}

func TestPending(t *testing.T) {
	tests := []struct {
		value   string
		pending bool
	}{
		{Pending("0123456789abcdef"), true},
		{"0123456789abcdef", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsPending(tt.value); got != tt.pending {
			t.Errorf("IsPending(%q) = %v, want %v", tt.value, got, tt.pending)
		}
	}
	if got := Pending("abc"); got != "pending-abc" {
		t.Errorf("Pending(abc) = %q", got)
	}
}
