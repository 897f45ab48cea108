package depgraph

import (
	"reflect"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// rule returns a rule named name in which dependent (resource.group)
// references each of deps.
func rule(name, dependent string, deps ...string) depv1alpha1.DependencyRule {
	r := depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.Spec.Dependent.Resource, r.Spec.Dependent.Group = split(dependent)
	for _, d := range deps {
		dep := depv1alpha1.Dependency{}
		dep.Resource, dep.Group = split(d)
		dep.FieldRef.Path = ".spec." + dep.Resource
		r.Spec.Dependencies = append(r.Spec.Dependencies, dep)
	}
	return r
}

func split(gr string) (resource, group string) {
	for i := range gr {
		if gr[i] == '.' {
			return gr[:i], gr[i+1:]
		}
	}
	return gr, ""
}

func TestCyclesByRule(t *testing.T) {
	tests := []struct {
		name  string
		rules []depv1alpha1.DependencyRule
		want  map[string][]string
	}{
		{
			name:  "no rules",
			rules: nil,
			want:  map[string][]string{},
		},
		{
			name: "chain without cycle",
			rules: []depv1alpha1.DependencyRule{
				rule("vm", "vms.compute", "vpcs.net", "disks.storage"),
				rule("subnet", "subnets.net", "vpcs.net"),
				rule("db", "dbs.data", "vms.compute", "subnets.net"),
			},
			want: map[string][]string{},
		},
		{
			name: "two-type cycle across two rules",
			rules: []depv1alpha1.DependencyRule{
				rule("vm", "vms.compute", "vpcs.net"),
				rule("vpc", "vpcs.net", "vms.compute"),
			},
			want: map[string][]string{
				"vm":  {"vms.compute → vpcs.net → vms.compute"},
				"vpc": {"vpcs.net → vms.compute → vpcs.net"},
			},
		},
		{
			name: "longer cycle; rules off the cycle are not reported",
			rules: []depv1alpha1.DependencyRule{
				rule("a", "as.x", "bs.x"),
				rule("b", "bs.x", "cs.x"),
				rule("c", "cs.x", "as.x", "ds.x"),
				rule("d", "ds.x", "es.x"),
				rule("e", "fs.x", "as.x"),
			},
			want: map[string][]string{
				"a": {"as.x → bs.x → cs.x → as.x"},
				"b": {"bs.x → cs.x → as.x → bs.x"},
				"c": {"cs.x → as.x → bs.x → cs.x"},
			},
		},
		{
			name: "type referencing itself",
			rules: []depv1alpha1.DependencyRule{
				rule("subnet", "subnets.net", "subnets.net", "vpcs.net"),
			},
			want: map[string][]string{
				"subnet": {"subnets.net → subnets.net"},
			},
		},
		{
			name: "one rule on two cycles reports both, by shortest path",
			rules: []depv1alpha1.DependencyRule{
				rule("hub", "hubs.x", "as.x", "bs.x"),
				rule("a", "as.x", "hubs.x"),
				rule("b", "bs.x", "cs.x"),
				rule("c", "cs.x", "hubs.x"),
			},
			want: map[string][]string{
				"hub": {"hubs.x → as.x → hubs.x", "hubs.x → bs.x → cs.x → hubs.x"},
				"a":   {"as.x → hubs.x → as.x"},
				"b":   {"bs.x → cs.x → hubs.x → bs.x"},
				"c":   {"cs.x → hubs.x → bs.x → cs.x"},
			},
		},
		{
			name: "same resource name in different groups is not a cycle",
			rules: []depv1alpha1.DependencyRule{
				rule("a", "things.a", "things.b"),
				rule("b", "things.b", "others.c"),
			},
			want: map[string][]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string][]string{}
			for key, cycles := range Build(tt.rules).CyclesByRule() {
				for _, c := range cycles {
					got[key.Name] = append(got[key.Name], c.String())
				}
				sort.Strings(got[key.Name])
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CyclesByRule() =\n  %v\nwant\n  %v", got, tt.want)
			}
		})
	}
}
