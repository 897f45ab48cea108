package registry

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

var (
	vpcs    = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
	subnets = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "subnets"}
	vms     = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
)

func rule(key string, dependent schema.GroupVersionResource, refs ...string) *Rule {
	r := &Rule{Key: key, Dependent: dependent, DependentKind: "Thing"}
	for _, ref := range refs {
		target, path, _ := strings.Cut(ref, "@")
		gr := schema.ParseGroupResource(target)
		r.References = append(r.References, Reference{Target: gr, Path: fieldpath.MustParse(path)})
	}
	return r
}

// paths renders FindByTargetGVR as "key dependent path,path".
func paths(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		var ps []string
		for _, p := range e.Paths {
			ps = append(ps, p.String())
		}
		out = append(out, fmt.Sprintf("%s %s %s", e.RuleKey, e.Dependent.Resource, strings.Join(ps, ",")))
	}
	return out
}

func TestFromDependencyRule(t *testing.T) {
	dr := &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{
		Name: "vm-deps", Annotations: map[string]string{logicalcluster.AnnotationKey: "c1"},
	}}
	dr.Spec.Dependent = depv1alpha1.DependentResource{Group: "compute.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"}
	dr.Spec.Dependencies = []depv1alpha1.Dependency{
		{Group: "network.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: "spec.vpcRef.name"}},
		{Group: "network.io", Version: "v2", Resource: "subnets", FieldRef: depv1alpha1.FieldReference{Path: ".spec.nics[*].subnet"}},
		{Group: "network.io", Version: "v1", Resource: "routers", FieldRef: depv1alpha1.FieldReference{Path: "spec..bad"}},
	}
	got := FromDependencyRule(dr)
	want := &Rule{
		Key: "c1/vm-deps", Dependent: vms, DependentKind: "VirtualMachine",
		References: []Reference{
			{Target: vpcs.GroupResource(), Path: fieldpath.MustParse(".spec.vpcRef.name")},
			{Target: subnets.GroupResource(), Path: fieldpath.MustParse(".spec.nics[*].subnet")},
		},
		Invalid: []string{"spec..bad"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromDependencyRule() =\n  %+v\nwant\n  %+v", got, want)
	}
}

func TestFindByTargetGVR(t *testing.T) {
	r := New()
	r.Apply(rule("c1/vm", vms, "vpcs.network.io@.spec.vpc", "vpcs.network.io@.spec.nics[*].vpc", "subnets.network.io@.spec.subnet"), 1)
	r.Apply(rule("c2/db", schema.GroupVersionResource{Group: "data.io", Version: "v1", Resource: "dbs"}, "vpcs.network.io@.spec.vpc"), 2)

	if got, want := paths(r.FindByTargetGVR(vpcs)), []string{
		"c1/vm virtualmachines .spec.nics[*].vpc,.spec.vpc",
		"c2/db dbs .spec.vpc",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("vpcs: %v, want %v", got, want)
	}
	// Any version of the target matches.
	if got := r.FindByTargetGVR(schema.GroupVersionResource{Group: "network.io", Version: "v2", Resource: "subnets"}); len(got) != 1 {
		t.Errorf("subnets in another version: %v", paths(got))
	}
	if got := r.FindByTargetGVR(vms); got != nil {
		t.Errorf("unprotected resource: %v", paths(got))
	}
	if r.Len() != 2 {
		t.Errorf("Len() = %d", r.Len())
	}

	// In-place edit: the rule now references subnets only.
	r.Apply(rule("c1/vm", vms, "subnets.network.io@.spec.subnet"), 3)
	if got := paths(r.FindByTargetGVR(vpcs)); !reflect.DeepEqual(got, []string{"c2/db dbs .spec.vpc"}) {
		t.Errorf("after edit: %v", got)
	}
	r.Delete("c2/db", 4)
	if got := r.FindByTargetGVR(vpcs); got != nil {
		t.Errorf("after delete: %v", paths(got))
	}
}

func TestVersionOrdering(t *testing.T) {
	r := New()
	r.Apply(rule("c1/vm", vms, "vpcs.network.io@.spec.vpc"), 10)

	// An older view does not replace a newer one.
	if r.Apply(rule("c1/vm", vms, "subnets.network.io@.spec.subnet"), 9) {
		t.Error("Apply() of an older version succeeded")
	}
	if len(r.FindByTargetGVR(vpcs)) != 1 {
		t.Error("older version replaced the newer one")
	}

	// Deleted as of the last version seen; an old listing cannot resurrect it.
	if !r.Delete("c1/vm", r.LastSeen("c1/vm")) {
		t.Error("Delete() changed nothing")
	}
	r.Sync([]*Rule{rule("c1/vm", vms, "vpcs.network.io@.spec.vpc")}, []uint64{10}, 10, func(string) bool { return true })
	if got := r.FindByTargetGVR(vpcs); got != nil {
		t.Errorf("an old listing resurrected a deleted rule: %v", paths(got))
	}

	// Recreated with a newer version.
	r.Apply(rule("c1/vm", vms, "vpcs.network.io@.spec.vpc"), 12)
	if len(r.FindByTargetGVR(vpcs)) != 1 {
		t.Error("recreated rule not registered")
	}
}

func TestSync(t *testing.T) {
	r := New()
	onShard1 := func(key string) bool { return strings.HasPrefix(key, "s1-") }
	r.Apply(rule("s1-a/keep", vms, "vpcs.network.io@.spec.vpc"), 5)
	r.Apply(rule("s1-a/gone", vms, "vpcs.network.io@.spec.other"), 6)
	r.Apply(rule("s1-b/new", vms, "vpcs.network.io@.spec.new"), 30) // registered after the listing
	r.Apply(rule("s2-a/other-shard", vms, "vpcs.network.io@.spec.x"), 1)

	r.Sync([]*Rule{
		rule("s1-a/keep", vms, "vpcs.network.io@.spec.vpc", "subnets.network.io@.spec.subnet"),
		rule("s1-c/listed", vms, "vpcs.network.io@.spec.listed"),
	}, []uint64{7, 8}, 20, onShard1)

	var keys []string
	for _, e := range r.FindByTargetGVR(vpcs) {
		keys = append(keys, e.RuleKey)
	}
	want := []string{"s1-a/keep", "s1-b/new", "s1-c/listed", "s2-a/other-shard"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("after Sync: %v, want %v", keys, want)
	}
	if len(r.FindByTargetGVR(subnets)) != 1 {
		t.Error("Sync did not apply the newer listed version")
	}
	if r.LastSeen("s1-a/gone") != 0 {
		t.Error("Sync kept a record of a rule the listing shows to be gone")
	}
}

func TestConcurrentAccess(t *testing.T) {
	r := New()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				key := fmt.Sprintf("c%d/r%d", w, i%10)
				r.Apply(rule(key, vms, "vpcs.network.io@.spec.vpc"), uint64(i+1))
				if i%3 == 0 {
					r.Delete(key, uint64(i+1))
				}
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				for _, e := range r.FindByTargetGVR(vpcs) {
					if e.Dependent != vms || len(e.Paths) != 1 {
						t.Errorf("inconsistent entry %+v", e)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestDeleteCluster(t *testing.T) {
	r := New()
	r.Apply(rule("c1/a", vms, "vpcs.network.io@.spec.vpc"), 5)
	r.Apply(rule("c1/b", vms, "vpcs.network.io@.spec.vpc2"), 9)
	r.Apply(rule("c10/a", vms, "vpcs.network.io@.spec.vpc"), 5)
	r.DeleteCluster("c1", 7)

	var keys []string
	for _, e := range r.FindByTargetGVR(vpcs) {
		keys = append(keys, e.RuleKey)
	}
	if want := []string{"c1/b", "c10/a"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("after DeleteCluster: %v, want %v (newer rules and other clusters stay)", keys, want)
	}
}
