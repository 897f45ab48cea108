package plugin

import (
	"errors"
	"testing"
)

func TestSplitTypeName(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		typ, name  string
		usageError bool
	}{
		{args: []string{"vpc/vpc-a"}, typ: "vpc", name: "vpc-a"},
		{args: []string{"vpcs.network.test.io/vpc-a"}, typ: "vpcs.network.test.io", name: "vpc-a"},
		{args: []string{"vpc", "vpc-a"}, typ: "vpc", name: "vpc-a"},
		{args: []string{"vpc"}, usageError: true},
		{args: []string{"vpc/"}, usageError: true},
		{args: []string{"/vpc-a"}, usageError: true},
		{args: []string{"vpc/a/b"}, usageError: true},
		{args: []string{"vpc/a", "b"}, usageError: true},
		{args: []string{"vpc", "a/b"}, usageError: true},
		{args: []string{"vpc", "a", "b"}, usageError: true},
		{args: nil, usageError: true},
	} {
		typ, name, err := splitTypeName(tc.args)
		if tc.usageError {
			if !errors.Is(err, errUsage) {
				t.Errorf("splitTypeName(%q): got %v, want a usage error", tc.args, err)
			}
			continue
		}
		if err != nil || typ != tc.typ || name != tc.name {
			t.Errorf("splitTypeName(%q) = %q, %q, %v; want %q, %q", tc.args, typ, name, err, tc.typ, tc.name)
		}
	}
}

func TestMappingFor(t *testing.T) {
	mapper := testMapper()
	for _, tc := range []struct {
		arg, resource string
	}{
		{"vpcs", "vpcs"},
		{"vpc", "vpcs"},
		{"VPC", "vpcs"},
		{"vpcs.network.test.io", "vpcs"},
		{"vpcs.v1.network.test.io", "vpcs"},
		{"VPC.network.test.io", "vpcs"},
		{"VPC.v1.network.test.io", "vpcs"},
		{"virtualmachine", "virtualmachines"},
		{"VirtualMachine", "virtualmachines"},
		{"zones", "zones"},
		{"gateways", ""},
		{"vpcs.compute.test.io", ""},
	} {
		m, err := mappingFor(mapper, tc.arg)
		switch {
		case tc.resource == "" && err == nil:
			t.Errorf("mappingFor(%q) = %s, want an error", tc.arg, m.Resource)
		case tc.resource != "" && err != nil:
			t.Errorf("mappingFor(%q): %v", tc.arg, err)
		case tc.resource != "" && m.Resource.Resource != tc.resource:
			t.Errorf("mappingFor(%q) = %s, want %s", tc.arg, m.Resource.Resource, tc.resource)
		}
	}
}

func TestResolve(t *testing.T) {
	mapper := testMapper()
	got, err := resolve(mapper, []string{"vpc/vpc-a"}, "team-a")
	if err != nil || got.Namespace != "team-a" || got.Name != "vpc-a" || got.describe() != `vpcs.network.test.io "vpc-a" in namespace "team-a"` {
		t.Errorf("resolve(vpc/vpc-a) = %+v, %v", got, err)
	}
	got, err = resolve(mapper, []string{"zone", "eu-1"}, "team-a")
	if err != nil || got.Namespace != "" || got.describe() != `zones.network.test.io "eu-1"` {
		t.Errorf("resolve(zone eu-1): a cluster-scoped object has no namespace, got %+v, %v", got, err)
	}
	if o := got.Object(); o != (Object{Kind: "Zone", Resource: "zones.network.test.io", Name: "eu-1"}) {
		t.Errorf("Object() = %+v", o)
	}
	if _, err := resolve(mapper, []string{"gateway/g"}, "default"); err == nil || err.Error() != `the server doesn't have a resource type "gateway"` {
		t.Errorf("resolve(gateway/g) = %v, want kubectl's error for an unknown type", err)
	}
}
