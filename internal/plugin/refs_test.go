package plugin

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/plugin/workspace"
	"github.com/opendefensecloud/dependency-controller/internal/plugin/workspace/workspacetest"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// labelled returns the labels of a dependent labelled under a scheme that
// references the objects with the given keys.
func labelled(keys ...string) map[string]string {
	l := map[string]string{depv1alpha1.LabelReferencesScheme: "s1"}
	for _, k := range keys {
		l[k] = ""
	}
	return l
}

func TestRefs(t *testing.T) {
	vpcA := reflabels.Key(vpcsGVR.GroupResource(), "vpc-a")
	zone := reflabels.Key(zonesGVR.GroupResource(), "eu-1")
	deleting := obj(vmsGVR, "default", "vm-going", labelled(vpcA), nil)
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)
	objects := map[string][]*unstructured.Unstructured{
		"vms": {
			obj(vmsGVR, "default", "vm-1", labelled(vpcA), map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}),
			obj(vmsGVR, "default", "vm-2", labelled(vpcA, zone), nil),
			obj(vmsGVR, "default", "vm-other", labelled(reflabels.Key(vpcsGVR.GroupResource(), "vpc-b")), nil),
			deleting,
			// Another namespace: only with the object's namespace next to the name.
			obj(vmsGVR, "team-b", "vm-across", labelled(vpcA), map[string]any{"vpcRef": map[string]any{"name": "vpc-a", "namespace": "default"}}),
			obj(vmsGVR, "team-b", "vm-own", labelled(vpcA), map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}),
			// Not labelled yet.
			obj(vmsGVR, "default", "vm-old", nil, nil),
			obj(vmsGVR, "team-b", "vm-old", nil, nil),
		},
		"vpcs": {
			obj(vpcsGVR, "default", "vpc-a", nil, nil),
			// A VPC that references a VPC (peering), and one that is not labelled: VPCs are no dependents otherwise.
			obj(vpcsGVR, "default", "vpc-peer", labelled(vpcA), nil),
		},
		"subnets": {obj(subnetsGVR, "default", "subnet-x", nil, nil)},
		"zones":   {obj(zonesGVR, "", "eu-1", labelled(vpcA), nil)},
	}
	reader := func() *workspacetest.Reader {
		r := &workspacetest.Reader{Objects: map[schema.GroupVersionResource][]*unstructured.Unstructured{}}
		for res, objs := range objects {
			r.Objects[map[string]schema.GroupVersionResource{"vms": vmsGVR, "vpcs": vpcsGVR, "subnets": subnetsGVR, "zones": zonesGVR}[res]] = objs
		}
		return r
	}
	mapper := testMapper()
	vpc := func(name, ns string) workspace.Target {
		t.Helper()
		target, err := workspace.Resolve(mapper, []string{"vpc", name}, ns)
		if err != nil {
			t.Fatal(err)
		}
		return target
	}
	vm := func(ns, name string) workspace.Object {
		return workspace.Object{Kind: "VirtualMachine", Resource: "virtualmachines.compute.test.io", Namespace: ns, Name: name}
	}

	t.Run("dependents in the namespace, across namespaces only with the namespace, cluster-scoped ones, not itself", func(t *testing.T) {
		r := reader()
		got := refs(context.Background(), r, vpc("vpc-a", "default"), testTypes)
		want := []workspace.Object{
			{Kind: "VPC", Resource: "vpcs.network.test.io", Namespace: "default", Name: "vpc-peer"},
			vm("default", "vm-1"), vm("default", "vm-2"), vm("team-b", "vm-across"),
			{Kind: "Zone", Resource: "zones.network.test.io", Name: "eu-1"},
		}
		if !reflect.DeepEqual(got.ReferencedBy, want) {
			t.Errorf("ReferencedBy = %+v\nwant %+v", got.ReferencedBy, want)
		}
		if !reflect.DeepEqual(got.Deleting, []workspace.Object{vm("default", "vm-going")}) {
			t.Errorf("Deleting = %+v", got.Deleting)
		}
		wantUnlabelled := []UnlabelledType{
			{Kind: "VPC", Resource: "vpcs.network.test.io", Count: 1},
			{Kind: "VirtualMachine", Resource: "virtualmachines.compute.test.io", Count: 2},
		}
		if !reflect.DeepEqual(got.Unlabelled, wantUnlabelled) {
			t.Errorf("Unlabelled = %+v, want %+v", got.Unlabelled, wantUnlabelled)
		}
		if !got.Exists || got.Types != 4 || got.Clean() {
			t.Errorf("Exists %v, Types %d, Clean %v", got.Exists, got.Types, got.Clean())
		}
		// Subnets have no labelled object: no count of unlabelled ones.
		if reqs := r.RequestsMatching("list subnets  !"); len(reqs) != 0 {
			t.Errorf("counted unlabelled Subnets: %q", reqs)
		}
		// Only the type with hits in other namespaces is read in full.
		if reqs := r.RequestsMatching("list virtualmachines  " + vpcA + " metadata.namespace!=default"); len(reqs) != 1 {
			t.Errorf("reads of VMs in other namespaces: %q", r.RequestsMatching("list virtualmachines"))
		}
		if reqs := r.RequestsMatching("list vpcs  " + vpcA + " metadata.namespace"); len(reqs) != 0 {
			t.Errorf("VPCs read in full: %q", reqs)
		}
	})

	t.Run("an object in another namespace sees the dependents of its own", func(t *testing.T) {
		got := refs(context.Background(), reader(), vpc("vpc-a", "team-b"), testTypes)
		// vm-across names default/vpc-a; labels do not name the namespace,
		// and a dependent in the object's namespace is taken to reference it.
		want := []workspace.Object{vm("team-b", "vm-across"), vm("team-b", "vm-own"), {Kind: "Zone", Resource: "zones.network.test.io", Name: "eu-1"}}
		if !reflect.DeepEqual(got.ReferencedBy, want) {
			t.Errorf("ReferencedBy = %+v, want %+v", got.ReferencedBy, want)
		}
		if got.Exists {
			t.Error("team-b/vpc-a does not exist")
		}
	})

	t.Run("a cluster-scoped object is referenced from every namespace", func(t *testing.T) {
		target, err := workspace.Resolve(mapper, []string{"zones/eu-1"}, "default")
		if err != nil {
			t.Fatal(err)
		}
		got := refs(context.Background(), reader(), target, testTypes)
		if !reflect.DeepEqual(got.ReferencedBy, []workspace.Object{vm("default", "vm-2")}) {
			t.Errorf("ReferencedBy = %+v", got.ReferencedBy)
		}
	})

	t.Run("nothing references it, but unlabelled dependents may", func(t *testing.T) {
		got := refs(context.Background(), reader(), vpc("vpc-c", "default"), testTypes)
		if len(got.ReferencedBy) != 0 || len(got.Unlabelled) != 2 || got.Clean() {
			t.Errorf("got %+v", got)
		}
	})

	t.Run("a type that cannot be read is named; one that went away is not", func(t *testing.T) {
		r := reader()
		r.ListErr = map[string]error{
			"subnets": apierrors.NewForbidden(subnetsGVR.GroupResource(), "", errors.New("no")),
			"zones":   apierrors.NewNotFound(zonesGVR.GroupResource(), ""),
		}
		got := refs(context.Background(), r, vpc("vpc-a", "default"), testTypes)
		if len(got.Unreadable) != 1 || got.Unreadable[0].Resource != "subnets.network.test.io" {
			t.Errorf("Unreadable = %+v", got.Unreadable)
		}
	})

	t.Run("dependents labelled under different rules are being relabelled", func(t *testing.T) {
		r := reader()
		l := labelled(vpcA)
		l[depv1alpha1.LabelReferencesScheme] = "s2"
		r.Objects[vmsGVR][1].SetLabels(l)
		got := refs(context.Background(), r, vpc("vpc-a", "default"), testTypes)
		want := UnlabelledType{Kind: "VirtualMachine", Resource: "virtualmachines.compute.test.io", Count: 2, Relabelling: true}
		if len(got.Unlabelled) != 2 || got.Unlabelled[1] != want {
			t.Errorf("Unlabelled = %+v, want %+v", got.Unlabelled, want)
		}
	})

	t.Run("clean", func(t *testing.T) {
		r := &workspacetest.Reader{Objects: map[schema.GroupVersionResource][]*unstructured.Unstructured{vpcsGVR: {obj(vpcsGVR, "default", "vpc-a", nil, nil)}}}
		got := refs(context.Background(), r, vpc("vpc-a", "default"), testTypes)
		if !got.Clean() || got.ReferencedBy == nil {
			t.Errorf("got %+v, want clean, with an empty (not null) list", got)
		}
	})
}

func TestPrintRefs(t *testing.T) {
	target, err := workspace.Resolve(testMapper(), []string{"vpc/vpc-a"}, "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		result RefsResult
		want   []string
	}{
		{
			name:   "nothing",
			result: RefsResult{Exists: true, ReferencedBy: []workspace.Object{}, Types: 7},
			want:   []string{`No object references vpcs.network.test.io "vpc-a" in namespace "default" (read the reference labels of the objects of 7 types that the workspace binds or defines).` + "\n"},
		},
		{
			name:   "nothing, and the object does not exist",
			result: RefsResult{ReferencedBy: []workspace.Object{}, Types: 1},
			want:   []string{"(read the reference labels of the objects of 1 type that the workspace binds or defines).\nIt does not exist.\n"},
		},
		{
			name: "dependents, one being deleted, unlabelled ones, an unreadable type, the object is gone",
			result: RefsResult{
				ReferencedBy: []workspace.Object{{Kind: "VirtualMachine", Namespace: "default", Name: "vm-1"}, {Kind: "Zone", Name: "eu-1"}},
				Deleting:     []workspace.Object{{Kind: "VirtualMachine", Namespace: "default", Name: "vm-3"}},
				Unlabelled: []UnlabelledType{
					{Kind: "VirtualMachine", Resource: "virtualmachines.compute.test.io", Count: 3},
					{Kind: "Subnet", Resource: "subnets.network.test.io", Relabelling: true},
				},
				Unreadable: []UnreadableType{{Resource: "subnets.network.test.io", Error: "forbidden"}},
				Types:      1,
			},
			want: []string{
				"KIND             NAMESPACE   NAME\n",
				"VirtualMachine   default     vm-1\n",
				"Zone             <none>      eu-1\n",
				`2 objects reference vpcs.network.test.io "vpc-a" in namespace "default" (read the reference labels of the objects of 1 type that the workspace binds or defines).` + "\n",
				"It does not exist: these references dangle.\n",
				"1 more object that references it is being deleted and no longer counts: VirtualMachine/default/vm-3.\n",
				"3 VirtualMachines are not labelled yet; they may reference it too (kubectl get virtualmachines.compute.test.io -A -l '!dependencies.opendefense.cloud/references' lists them;",
				"Could not read subnets.network.test.io, whose objects may reference it: forbidden.\n",
				"The subnets.network.test.io are being relabelled after their rules changed: the labels of some may not be current, and they may reference it too (kubectl dependencies why asks the webhook).\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printRefs(&out, target, tc.result); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestHoldsString(t *testing.T) {
	v := map[string]any{"spec": map[string]any{"refs": []any{map[string]any{"ns": "team-a"}}, "n": int64(3)}}
	if !holdsString(v, "team-a") || holdsString(v, "team-b") || holdsString(nil, "") {
		t.Error("holdsString")
	}
}
