package registry

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

var (
	vpcs    = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
	subnets = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "subnets"}
	vms     = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
)

func key(s string) kcp.ObjectKey {
	cluster, name, _ := strings.Cut(s, "/")
	return kcp.ObjectKey{Cluster: logicalcluster.Name(cluster), Name: name}
}

// netWorkspace is the workspace of the provider of the protected resources,
// unless a reference names another.
const netWorkspace = "root:net"

// source is the dependent source of a rule of cluster.
func source(cluster string, dependent schema.GroupVersionResource) index.Source {
	return index.Source{Export: kcp.ObjectKey{Cluster: logicalcluster.Name(cluster), Name: dependent.Group}, Resource: dependent}
}

// rule returns the metadata of rule "cluster/name" (object UID uid, version
// rv) whose dependent references "[workspace|]resource.group@path" for each
// of refs.
func rule(k, uid string, rv int, dependent schema.GroupVersionResource, refs ...string) *Rule {
	r := &Rule{Key: key(k), UID: types.UID(uid), ResourceVersion: fmt.Sprint(rv), Dependent: source(string(key(k).Cluster), dependent), DependentKind: "Thing"}
	for _, ref := range refs {
		workspace, ref, ok := strings.Cut(ref, "|")
		if !ok {
			workspace, ref = netWorkspace, workspace
		}
		target, path, _ := strings.Cut(ref, "@")
		gr := schema.ParseGroupResource(target)
		r.References = append(r.References, Reference{Workspace: logicalcluster.NewPath(workspace), Export: gr.Group, Target: gr, Version: "v1", Path: fieldpathtest.MustParse(path)})
	}
	return r
}

// newRegistry returns a registry in which root:net is bound as c-net.
func newRegistry() *Registry {
	r := New()
	r.SetWorkspace(netWorkspace, "c-net")
	return r
}

// find returns the entries protecting gvr served from root:net.
func find(r *Registry, gvr schema.GroupVersionResource) []Entry {
	return r.Find(Target{Cluster: "c-net", Resource: gvr.GroupResource()})
}

// paths renders FindByTargetGVR as "key dependent path,path".
func paths(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		var ps []string
		for _, p := range e.Paths {
			ps = append(ps, p.String())
		}
		out = append(out, fmt.Sprintf("%s %s %s", e.Rule, e.Dependent.Resource.Resource, strings.Join(ps, ",")))
	}
	return out
}

func keys(r *Registry, gvr schema.GroupVersionResource) []string {
	var out []string
	for _, e := range find(r, gvr) {
		out = append(out, e.Rule.String())
	}
	return out
}

// everywhere is a listing scope covering every cluster.
func everywhere(logicalcluster.Name) bool { return true }

func TestFromDependencyRule(t *testing.T) {
	dr := &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{
		Name: "vm-deps", UID: "u1", ResourceVersion: "42", Annotations: map[string]string{logicalcluster.AnnotationKey: "c1"},
	}}
	dr.Spec.Dependent = depv1alpha1.DependentResource{APIExportName: "compute.io", Group: "compute.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"}
	ref := func(path string) depv1alpha1.APIExportReference {
		return depv1alpha1.APIExportReference{Path: path, Name: "network.io"}
	}
	dr.Spec.Dependencies = []depv1alpha1.Dependency{
		{APIExportRef: ref("root:net"), Group: "network.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: "spec.vpcRef.name"}},
		{APIExportRef: ref("root:org:net"), Group: "network.io", Version: "v2", Resource: "subnets", FieldRef: depv1alpha1.FieldReference{Path: ".spec.nics[*].subnet"}},
		{APIExportRef: ref("root:net"), Group: "network.io", Version: "v1", Resource: "routers", FieldRef: depv1alpha1.FieldReference{Path: "spec..bad"}},
	}
	got := FromDependencyRule(dr)
	want := &Rule{
		Key: key("c1/vm-deps"), UID: "u1", ResourceVersion: "42", Dependent: source("c1", vms), DependentKind: "VirtualMachine",
		References: []Reference{
			{Workspace: logicalcluster.NewPath("root:net"), Export: "network.io", Target: vpcs.GroupResource(), Version: "v1", Path: fieldpathtest.MustParse(".spec.vpcRef.name")},
			{Workspace: logicalcluster.NewPath("root:org:net"), Export: "network.io", Target: subnets.GroupResource(), Version: "v2", Path: fieldpathtest.MustParse(".spec.nics[*].subnet")},
		},
		Invalid: []string{"spec..bad"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromDependencyRule() =\n  %+v\nwant\n  %+v", got, want)
	}
}

func TestFindByTargetGVR(t *testing.T) {
	r := newRegistry()
	r.Apply(rule("c1/vm", "u1", 1, vms, "vpcs.network.io@.spec.vpc", "vpcs.network.io@.spec.nics[*].vpc", "subnets.network.io@.spec.subnet"))
	r.Apply(rule("c2/db", "u2", 2, schema.GroupVersionResource{Group: "data.io", Version: "v1", Resource: "dbs"}, "vpcs.network.io@.spec.vpc"))
	r.Apply(rule("c3/other-provider", "u3", 2, vms, "root:other|vpcs.network.io@.spec.vpc"))

	if got, want := paths(find(r, vpcs)), []string{
		"c1/vm virtualmachines .spec.nics[*].vpc,.spec.vpc",
		"c2/db dbs .spec.vpc",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("vpcs: %v, want %v", got, want)
	}
	// Any version of the target matches.
	if got := find(r, schema.GroupVersionResource{Group: "network.io", Version: "v2", Resource: "subnets"}); len(got) != 1 {
		t.Errorf("subnets in another version: %v", paths(got))
	}
	if got := find(r, vms); got != nil {
		t.Errorf("unprotected resource: %v", paths(got))
	}
	if r.Len() != 3 {
		t.Errorf("Len() = %d", r.Len())
	}

	// In-place edit: the rule now references subnets only.
	r.Apply(rule("c1/vm", "u1", 3, vms, "subnets.network.io@.spec.subnet"))
	if got := paths(find(r, vpcs)); !reflect.DeepEqual(got, []string{"c2/db dbs .spec.vpc"}) {
		t.Errorf("after edit: %v", got)
	}
	r.Forget(key("c2/db"))
	if got := find(r, vpcs); got != nil {
		t.Errorf("after Forget: %v", paths(got))
	}
}

func TestVersionOrdering(t *testing.T) {
	r := newRegistry()
	r.Apply(rule("c1/vm", "u1", 10, vms, "vpcs.network.io@.spec.vpc"))

	// An older view of the same object does not replace a newer one.
	if r.Apply(rule("c1/vm", "u1", 9, vms, "subnets.network.io@.spec.subnet")) {
		t.Error("Apply() of an older version succeeded")
	}
	if len(find(r, vpcs)) != 1 {
		t.Error("older version replaced the newer one")
	}
	// Versions compare as numbers, not as strings.
	r.Apply(rule("c1/big", "u2", 99, vms, "vpcs.network.io@.spec.a"))
	if !r.Apply(rule("c1/big", "u2", 100, vms, "vpcs.network.io@.spec.b")) {
		t.Error("Apply() of version 100 after 99 was ignored")
	}

	// Deleted (the cache saw it): an old listing cannot resurrect it.
	if !r.Forget(key("c1/vm")) {
		t.Error("Forget() changed nothing")
	}
	r.Sync(Listing{Rules: []*Rule{rule("c1/vm", "u1", 10, vms, "vpcs.network.io@.spec.vpc")}, ResourceVersion: "10", Covers: everywhere})
	if got := keys(r, vpcs); !reflect.DeepEqual(got, []string{"c1/big"}) {
		t.Errorf("an old listing resurrected a deleted rule: %v", got)
	}
}

// A rule deleted and recreated under the same name is a new object (a new
// UID) and is registered at once, whatever the order in which the deletion
// and the new object arrive.
func TestRecreatedRuleIsRegistered(t *testing.T) {
	r := newRegistry()
	r.Apply(rule("c1/vm", "old", 10, vms, "vpcs.network.io@.spec.vpc"))
	r.Forget(key("c1/vm"))
	if !r.Apply(rule("c1/vm", "new", 12, vms, "vpcs.network.io@.spec.vpc")) {
		t.Fatal("the recreated rule was not registered")
	}

	// A listing that still shows the old object, taken before the
	// deletion, changes nothing.
	r.Sync(Listing{Rules: []*Rule{rule("c1/vm", "old", 10, vms, "subnets.network.io@.spec.subnet")}, ResourceVersion: "11", Covers: everywhere})
	if got := keys(r, vpcs); !reflect.DeepEqual(got, []string{"c1/vm"}) {
		t.Errorf("after an old listing: %v", got)
	}

	// The new object arrives through a listing before the cache has seen
	// it, and the cache reports the name as gone (it has only seen the
	// deletion of the old object): the new object is forgotten without a
	// tombstone and registered again as soon as the cache sees it.
	r2 := newRegistry()
	r2.Apply(rule("c1/vm", "old", 10, vms, "vpcs.network.io@.spec.vpc"))
	r2.Sync(Listing{Rules: []*Rule{rule("c1/vm", "new", 12, vms, "vpcs.network.io@.spec.vpc")}, ResourceVersion: "12", Covers: everywhere})
	r2.Forget(key("c1/vm"))
	if !r2.Apply(rule("c1/vm", "new", 12, vms, "vpcs.network.io@.spec.vpc")) {
		t.Error("the new object was buried by the deletion of the old one")
	}
}

func TestSync(t *testing.T) {
	r := newRegistry()
	onShard1 := func(c logicalcluster.Name) bool { return strings.HasPrefix(string(c), "s1-") }
	r.Apply(rule("s1-a/keep", "u1", 5, vms, "vpcs.network.io@.spec.vpc"))
	r.Apply(rule("s1-a/gone", "u2", 6, vms, "vpcs.network.io@.spec.other"))
	r.Apply(rule("s1-b/new", "u3", 30, vms, "vpcs.network.io@.spec.new")) // registered after the listing
	r.Apply(rule("s2-a/other-shard", "u4", 1, vms, "vpcs.network.io@.spec.x"))

	r.Sync(Listing{Rules: []*Rule{
		rule("s1-a/keep", "u1", 7, vms, "vpcs.network.io@.spec.vpc", "subnets.network.io@.spec.subnet"),
		rule("s1-c/listed", "u5", 8, vms, "vpcs.network.io@.spec.listed"),
	}, ResourceVersion: "20", Covers: onShard1})

	if got, want := keys(r, vpcs), []string{"s1-a/keep", "s1-b/new", "s1-c/listed", "s2-a/other-shard"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after Sync: %v, want %v", got, want)
	}
	if len(find(r, subnets)) != 1 {
		t.Error("Sync did not apply the newer listed version")
	}
	// The rule the listing proved gone cannot come back in its old version.
	if r.Apply(rule("s1-a/gone", "u2", 6, vms, "vpcs.network.io@.spec.other")) {
		t.Error("a rule the listing proved gone was registered again")
	}
}

// A workspace that stops binding the APIExport loses its rules, whatever the
// resourceVersions of its binding and of rules elsewhere; if it binds again,
// its rules are registered again.
func TestForgetCluster(t *testing.T) {
	r := newRegistry()
	r.Apply(rule("c1/a", "u1", 5, vms, "vpcs.network.io@.spec.vpc"))
	r.Apply(rule("c1/b", "u2", 9000, vms, "vpcs.network.io@.spec.vpc2"))
	r.Apply(rule("c10/a", "u3", 5, vms, "vpcs.network.io@.spec.vpc"))
	r.ForgetCluster("c1")
	if got, want := keys(r, vpcs), []string{"c10/a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after ForgetCluster: %v, want %v (other clusters stay)", got, want)
	}

	r.Apply(rule("c1/a", "u1", 5, vms, "vpcs.network.io@.spec.vpc"))
	if got, want := keys(r, vpcs), []string{"c1/a", "c10/a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after binding again: %v, want %v", got, want)
	}
}

func TestTombstonesExpire(t *testing.T) {
	r := newRegistry()
	now := time.Unix(0, 0)
	r.now = func() time.Time { return now }
	r.Apply(rule("c1/vm", "u1", 1, vms, "vpcs.network.io@.spec.vpc"))
	r.Forget(key("c1/vm"))
	now = now.Add(tombstoneTTL + time.Second)
	r.Sync(Listing{ResourceVersion: "2", Covers: everywhere})
	if len(r.tombstones) != 0 {
		t.Errorf("tombstones kept past their time: %v", r.tombstones)
	}
}

func TestConcurrentAccess(t *testing.T) {
	r := newRegistry()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				k := fmt.Sprintf("c%d/r%d", w, i%10)
				r.Apply(rule(k, fmt.Sprintf("u%d-%d", w, i), i+1, vms, "vpcs.network.io@.spec.vpc"))
				if i%3 == 0 {
					r.Forget(key(k))
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				for _, e := range find(r, vpcs) {
					if e.Dependent.Resource != vms || len(e.Paths) != 1 {
						t.Errorf("inconsistent entry %+v", e)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// A rule protects the resource of the provider whose workspace it names, not
// another provider's resource of the same name.
func TestRulesBindToTheProviderWorkspace(t *testing.T) {
	r := newRegistry()
	r.Apply(rule("c1/vm", "u1", 1, vms, "vpcs.network.io@.spec.vpc"))
	r.Apply(rule("c1/vm-other", "u2", 2, vms, "root:other|vpcs.network.io@.spec.otherVPC"))

	if got := paths(r.Find(Target{Cluster: "c-net", Resource: vpcs.GroupResource()})); !reflect.DeepEqual(got, []string{"c1/vm virtualmachines .spec.vpc"}) {
		t.Errorf("vpcs of root:net: %v", got)
	}
	// root:other does not bind the APIExport yet: nothing there is protected.
	if got := r.Find(Target{Cluster: "c-other", Resource: vpcs.GroupResource()}); got != nil {
		t.Errorf("vpcs of an unbound workspace: %v", paths(got))
	}
	r.SetWorkspace("root:other", "c-other")
	if got := paths(r.Find(Target{Cluster: "c-other", Resource: vpcs.GroupResource()})); !reflect.DeepEqual(got, []string{"c1/vm-other virtualmachines .spec.otherVPC"}) {
		t.Errorf("vpcs of root:other once bound: %v", got)
	}
	// The workspace stops binding the export.
	r.ForgetCluster("c-other")
	if got := r.Find(Target{Cluster: "c-other", Resource: vpcs.GroupResource()}); got != nil {
		t.Errorf("vpcs of root:other after it stopped binding: %v", paths(got))
	}
	// A listing of all bindings replaces the workspaces.
	r.SetWorkspaces(map[string]logicalcluster.Name{"root:net": "c-net2"})
	if got := r.Find(Target{Cluster: "c-net2", Resource: vpcs.GroupResource()}); len(got) != 1 {
		t.Errorf("after the workspace was recreated as c-net2: %v", paths(got))
	}
}

// targetSource is the source through which targets of gvr in the workspace
// of cluster are read.
func targetSource(cluster string, gvr schema.GroupVersionResource) index.Source {
	return index.Source{Export: kcp.ObjectKey{Cluster: logicalcluster.Name(cluster), Name: gvr.Group}, Resource: gvr}
}

// The index is told which sources to watch, with the paths of every rule
// that names each, and which to read (targets, no paths), and is told again
// when rules change.
func TestSources(t *testing.T) {
	r := newRegistry()
	var got map[index.Source][]fieldpath.Reference
	r.OnSourcesChange(func(s map[index.Source][]fieldpath.Reference) { got = s })
	r.Apply(rule("c1/a", "u1", 1, vms, "vpcs.network.io@.spec.vpc", "subnets.network.io@.spec.subnet"))
	r.Apply(rule("c1/b", "u2", 1, vms, "vpcs.network.io@.spec.vpc", "root:unbound|vpcs.network.io@.spec.x"))
	r.Apply(rule("c2/a", "u3", 1, vms, "vpcs.network.io@.spec.vpc"))
	want := map[index.Source][]fieldpath.Reference{
		source("c1", vms):              {fieldpathtest.MustParse(".spec.subnet"), fieldpathtest.MustParse(".spec.vpc"), fieldpathtest.MustParse(".spec.x")},
		source("c2", vms):              {fieldpathtest.MustParse(".spec.vpc")},
		targetSource("c-net", vpcs):    nil,
		targetSource("c-net", subnets): nil,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sources = %v, want %v", got, want)
	}
	r.Forget(key("c2/a"))
	r.Forget(key("c1/a"))
	if _, ok := got[source("c2", vms)]; ok || len(got) != 2 {
		t.Errorf("after Forget: %v", got)
	}
	if _, ok := got[targetSource("c-net", subnets)]; ok {
		t.Errorf("a target no rule names any more is still read: %v", got)
	}
}

// A target type that is also a dependent (objects of one type reference
// each other) is watched.
func TestTargetThatIsADependentIsWatched(t *testing.T) {
	r := newRegistry()
	var got map[index.Source][]fieldpath.Reference
	r.OnSourcesChange(func(s map[index.Source][]fieldpath.Reference) { got = s })
	r.SetWorkspace("root:c1", "c1")
	r.Apply(rule("c1/self", "u1", 1, vms, "root:c1|virtualmachines.compute.io@.spec.parent"))
	if want := (map[index.Source][]fieldpath.Reference{source("c1", vms): {fieldpathtest.MustParse(".spec.parent")}}); !reflect.DeepEqual(got, want) {
		t.Errorf("sources = %v, want %v", got, want)
	}
}

// The guards of a provider are the rules whose dependent it serves, with
// their references and the sources of their targets; a reference to a
// workspace that does not bind the export has none yet.
func TestFindGuards(t *testing.T) {
	r := newRegistry()
	r.Apply(rule("c1/b", "u2", 1, vms, "vpcs.network.io@.spec.vpc", "root:unbound|vpcs.network.io@.spec.x"))
	r.Apply(rule("c1/a", "u1", 1, vms, "subnets.network.io@.spec.subnet"))
	r.Apply(rule("c2/a", "u3", 1, vms, "vpcs.network.io@.spec.vpc"))

	got := r.FindGuards(Target{Cluster: "c1", Resource: vms.GroupResource()})
	want := []Guard{
		{Rule: key("c1/a"), Dependent: source("c1", vms), References: []GuardReference{{Path: fieldpathtest.MustParse(".spec.subnet"), Target: targetSource("c-net", subnets)}}},
		{Rule: key("c1/b"), Dependent: source("c1", vms), References: []GuardReference{
			{Path: fieldpathtest.MustParse(".spec.vpc"), Target: targetSource("c-net", vpcs)},
			{Path: fieldpathtest.MustParse(".spec.x")},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FindGuards(c1) =\n  %+v\nwant\n  %+v", got, want)
	}
	if got := r.FindGuards(Target{Cluster: "c-net", Resource: vms.GroupResource()}); got != nil {
		t.Errorf("a workspace that serves no dependent has guards: %+v", got)
	}
	if g, ok := r.GuardOf(key("c2/a")); !ok || g.Rule != key("c2/a") {
		t.Errorf("GuardOf(c2/a) = %+v, %v", g, ok)
	}

	// Once the workspace binds, its reference is read.
	r.SetWorkspace("root:unbound", "c-unbound")
	g, _ := r.GuardOf(key("c1/b"))
	if g.References[1].Target != targetSource("c-unbound", vpcs) {
		t.Errorf("after binding: %+v", g.References[1])
	}
	r.Forget(key("c1/b"))
	if _, ok := r.GuardOf(key("c1/b")); ok {
		t.Error("a forgotten rule still has a guard")
	}
}

// The webhook's labelling schemes are those the controller computes from
// the same rule objects: the webhook vouches for labels only when the
// configuration that calls it was made for its own scheme.
func TestLabellingAgreesWithTheController(t *testing.T) {
	newRule := func(cluster, name, uid string, generation int64, dependent string, paths ...string) *depv1alpha1.DependencyRule {
		r := &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID(uid), Generation: generation, ResourceVersion: "1",
			Annotations: map[string]string{logicalcluster.AnnotationKey: cluster},
		}}
		r.Spec.Dependent = depv1alpha1.DependentResource{APIExportName: "compute.io", Group: "compute.io", Version: "v1", Kind: "VirtualMachine", Resource: dependent}
		for _, p := range paths {
			r.Spec.Dependencies = append(r.Spec.Dependencies, depv1alpha1.Dependency{
				APIExportRef: depv1alpha1.APIExportReference{Path: netWorkspace, Name: "network.io"},
				Group:        "network.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: p},
			})
		}
		return r
	}
	a := newRule("c1", "a", "uid-a", 3, "virtualmachines", ".spec.vpc", ".spec.nics[*].vpc")
	b := newRule("c1", "b", "uid-b", 1, "virtualmachines", ".spec.backupVPC")
	status := newRule("c1", "s", "uid-s", 1, "gateways", ".status.vpc")
	other := newRule("c2", "a", "uid-c", 1, "virtualmachines", ".spec.vpc")
	reg := newRegistry()
	for _, r := range []*depv1alpha1.DependencyRule{a, b, status, other} {
		reg.Apply(FromDependencyRule(r))
	}

	vmsOf := func(cluster logicalcluster.Name) Target {
		return Target{Cluster: cluster, Resource: schema.GroupResource{Group: "compute.io", Resource: "virtualmachines"}}
	}
	l, ok := reg.Labelling(vmsOf("c1"))
	if !ok || !l.Labellable {
		t.Fatalf("Labelling(c1 VMs) = %+v, %v; want labellable", l, ok)
	}
	want, reason := reflabels.SchemeOf([]reflabels.Rule{reflabels.RuleOf(a), reflabels.RuleOf(b)})
	if reason != "" || l.Scheme.Fingerprint != want.Fingerprint {
		t.Errorf("c1 VMs: scheme %q, the controller's %q (%s)", l.Scheme.Fingerprint, want.Fingerprint, reason)
	}
	if !reflect.DeepEqual(l.Rules, []kcp.ObjectKey{key("c1/a"), key("c1/b")}) {
		t.Errorf("c1 VMs: rules %v", l.Rules)
	}
	if l.Dependent.Export != (kcp.ObjectKey{Cluster: "c1", Name: "compute.io"}) {
		t.Errorf("c1 VMs: dependent %v", l.Dependent)
	}
	if l2, _ := reg.Labelling(vmsOf("c2")); l2.Scheme.Fingerprint == l.Scheme.Fingerprint {
		t.Error("two workspaces' rules share a scheme")
	}
	gws, ok := reg.Labelling(Target{Cluster: "c1", Resource: schema.GroupResource{Group: "compute.io", Resource: "gateways"}})
	if !ok || gws.Labellable || !strings.Contains(gws.Reason, "status") {
		t.Errorf("a type with a reference in the status: %+v, %v; want not labellable, saying why", gws, ok)
	}
	if _, ok := reg.Labelling(vmsOf("c9")); ok {
		t.Error("a workspace without rules has a labelling")
	}

	// A new generation with the same references keeps the scheme; a new
	// reference changes it.
	a2 := a.DeepCopy()
	a2.Generation, a2.ResourceVersion, a2.Spec.DeletionPolicy = 4, "2", depv1alpha1.DeletionPolicyReplay
	reg.Apply(FromDependencyRule(a2))
	if l2, _ := reg.Labelling(vmsOf("c1")); l2.Scheme.Fingerprint != l.Scheme.Fingerprint {
		t.Error("a change of the deletion policy changed the scheme")
	}
	a3 := a.DeepCopy()
	a3.Generation, a3.ResourceVersion = 5, "3"
	a3.Spec.Dependencies = a3.Spec.Dependencies[:1]
	reg.Apply(FromDependencyRule(a3))
	if l3, _ := reg.Labelling(vmsOf("c1")); l3.Scheme.Fingerprint == l.Scheme.Fingerprint {
		t.Error("dropping a reference kept the scheme")
	}
}

func TestProtections(t *testing.T) {
	r := newRegistry()
	replaying := func(rl *Rule) *Rule {
		rl.Replay = true
		return rl
	}
	// VPCs of c-net are protected by a Replay rule and a Deny rule, subnets
	// only under a Deny rule; a Replay rule whose workspace is unbound
	// protects nothing yet.
	r.Apply(replaying(rule("c1/a", "u1", 1, vms, "vpcs.network.io@.spec.vpc")))
	r.Apply(rule("c2/a", "u2", 1, vms, "vpcs.network.io@.spec.vpc"))
	r.Apply(rule("c1/b", "u3", 1, vms, "subnets.network.io@.spec.subnet"))
	r.Apply(replaying(rule("c1/c", "u4", 1, vms, "root:unbound|routers.network.io@.spec.router")))

	want := []Protection{
		{Target: Target{Cluster: "c-net", Resource: subnets.GroupResource()}, Source: targetSource("c-net", subnets)},
		{Target: Target{Cluster: "c-net", Resource: vpcs.GroupResource()}, Source: targetSource("c-net", vpcs), Replay: true},
	}
	if got := r.Protections(); !reflect.DeepEqual(got, want) {
		t.Errorf("Protections() = %+v, want %+v", got, want)
	}
	for _, e := range r.Find(Target{Cluster: "c-net", Resource: vpcs.GroupResource()}) {
		if e.Replay != (e.Rule == key("c1/a")) || e.Target != targetSource("c-net", vpcs) {
			t.Errorf("entry %+v: want Replay for c1/a only, with the target's source", e)
		}
	}

	// Once the workspace binds, its routers are protected too.
	r.SetWorkspace("root:unbound", "c-unbound")
	routers := schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "routers"}
	got := r.Protections()
	if len(got) != 3 || got[2].Target.Cluster != "c-unbound" || got[2].Source != targetSource("c-unbound", routers) || !got[2].Replay {
		t.Errorf("after binding, Protections() = %+v", got)
	}
}

func TestFromDependencyRuleReadsTheDeletionPolicy(t *testing.T) {
	for policy, want := range map[depv1alpha1.DeletionPolicy]bool{"": false, depv1alpha1.DeletionPolicyDeny: false, depv1alpha1.DeletionPolicyReplay: true} {
		rl := &depv1alpha1.DependencyRule{Spec: depv1alpha1.DependencyRuleSpec{DeletionPolicy: policy}}
		if got := FromDependencyRule(rl).Replay; got != want {
			t.Errorf("deletionPolicy %q: Replay = %v, want %v", policy, got, want)
		}
	}
}
