// Package manifests_test builds every kustomization under config/ and checks
// the objects each one produces: what make deploy applies, and the samples.
package manifests_test

import (
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

var configDir = filepath.Join(kcpenv.RepoRoot(), "config")

func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(configDir, dir))
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", dir, err)
	}
	raw, err := resMap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kcpenv.DecodeYAML(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatalf("config/%s builds no objects", dir)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(out)
	return out
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatalf("%s/%s: %v", o.GetKind(), o.GetName(), err)
	}
	return out
}

// allows reports whether the role grants verb on group/resource (or on a
// non-resource URL when group is "url").
func allows(role *rbacv1.ClusterRole, group, resource, verb string) bool {
	match := func(list []string, s string) bool { return slices.Contains(list, s) || slices.Contains(list, "*") }
	for _, r := range role.Rules {
		if group == "url" {
			if match(r.NonResourceURLs, resource) && match(r.Verbs, verb) {
				return true
			}
			continue
		}
		if match(r.APIGroups, group) && match(r.Resources, resource) && match(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// checkRBAC checks that every binding refers to a role in the same build and
// binds the expected user, and returns the roles by name.
func checkRBAC(t *testing.T, objs []*unstructured.Unstructured, users map[string]string) map[string]*rbacv1.ClusterRole {
	t.Helper()
	roles := map[string]*rbacv1.ClusterRole{}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" {
			roles[o.GetName()] = convert[rbacv1.ClusterRole](t, o)
		}
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		b := convert[rbacv1.ClusterRoleBinding](t, o)
		if _, ok := roles[b.RoleRef.Name]; !ok || b.RoleRef.Kind != "ClusterRole" {
			t.Errorf("ClusterRoleBinding %s refers to %s %s, which the build does not contain", b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		want, ok := users[b.Name]
		if !ok {
			t.Errorf("unexpected ClusterRoleBinding %s", b.Name)
			continue
		}
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != rbacv1.UserKind || b.Subjects[0].Name != want {
			t.Errorf("ClusterRoleBinding %s binds %+v, want User %s", b.Name, b.Subjects, want)
		}
	}
	for name := range users {
		if find(objs, "ClusterRoleBinding", name) == nil {
			t.Errorf("ClusterRoleBinding %s missing", name)
		}
	}
	return roles
}

func TestDepCtrlWorkspace(t *testing.T) {
	objs := build(t, "deploy/dep-ctrl")

	export := find(objs, "APIExport", "dependencies.opendefense.cloud")
	if export == nil {
		t.Fatalf("no APIExport in %v", names(objs))
	}
	spec := convert[apisv1alpha2.APIExport](t, export).Spec
	if len(spec.Resources) != 1 || spec.Resources[0].Name != "dependencyrules" || find(objs, "APIResourceSchema", spec.Resources[0].Schema) == nil {
		t.Errorf("APIExport resources %+v do not match an APIResourceSchema of the build %v", spec.Resources, names(objs))
	}
	claims := map[string][]string{}
	for _, c := range spec.PermissionClaims {
		claims[c.Group+"/"+c.Resource] = c.Verbs
	}
	for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
		if !slices.Contains(claims["admissionregistration.k8s.io/validatingwebhookconfigurations"], v) {
			t.Errorf("the validatingwebhookconfigurations claim lacks %q: %v", v, claims)
		}
	}
	if !slices.Contains(claims["/events"], "create") {
		t.Errorf("no claim to create events: %v", claims)
	}

	roles := checkRBAC(t, objs, map[string]string{"dependency-controller": "dependency-controller", "dependency-webhook": "dependency-webhook"})
	controller, webhook := roles["dependency-controller"], roles["dependency-webhook"]
	for _, check := range []struct {
		role                  *rbacv1.ClusterRole
		group, resource, verb string
	}{
		{controller, "url", "/", "access"},
		{controller, "apis.kcp.io", "apiexportendpointslices", "get"},
		{controller, "apis.kcp.io", "apiexports/content", "list"},
		{controller, "apis.kcp.io", "apiexports/content", "update"},
		{controller, "coordination.k8s.io", "leases", "update"},
		{webhook, "url", "/", "access"},
		{webhook, "apis.kcp.io", "apiexportendpointslices", "get"},
		{webhook, "apis.kcp.io", "apiexports/content", "watch"},
	} {
		if check.role == nil || !allows(check.role, check.group, check.resource, check.verb) {
			t.Errorf("role %v does not allow %s on %s %s", check.role, check.verb, check.group, check.resource)
		}
	}
	if allows(webhook, "apis.kcp.io", "apiexports/content", "update") || allows(webhook, "apis.kcp.io", "apiexports/content", "delete") {
		t.Errorf("the webhook only reads through the dependencies export's virtual workspace, and patches the status of rules")
	}
	// Its lease, in its own workspace, elects the replica that replays
	// deferred deletions.
	if !allows(webhook, "coordination.k8s.io", "leases", "update") {
		t.Errorf("the webhook cannot hold its lease")
	}
}

// The webhook is granted access by each provider for its own APIExport
// only (config/samples/*/webhook-access.yaml), never broadly: reads, and
// patch and delete of the export's objects (marks, deferred deletion),
// nothing else.
func TestWebhookAccessSamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configDir, "samples", "*", "webhook-access.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no webhook-access.yaml samples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			objs, err := kcpenv.ReadYAMLFile(f)
			if err != nil {
				t.Fatal(err)
			}
			roles := checkRBAC(t, objs, map[string]string{"dependency-webhook-access": "dependency-webhook"})
			role := roles["dependency-webhook-access"]
			if !allows(role, "apis.kcp.io", "apiexports/content", "list") || !allows(role, "apis.kcp.io", "apiexportendpointslices", "get") {
				t.Errorf("the sample does not let the webhook read the export: %+v", role)
			}
			for _, r := range role.Rules {
				// APIResourceSchemas hold the provider's API definitions, no
				// objects of any tenant; their names change with every
				// schema change, so they are granted by type, for get only.
				schemasOnly := slices.Equal(r.Resources, []string{"apiresourceschemas"}) && slices.Equal(r.Verbs, []string{"get"})
				if len(r.Resources) > 0 && len(r.ResourceNames) == 0 && !schemasOnly {
					t.Errorf("rule %+v is not limited to the provider's export by name", r)
				}
				// Writes only on the export's content: patch records a
				// deferred deletion and relabels dependents, delete replays
				// a deferred deletion, create writes Events through the
				// export's events claim (and the namespace probe's dry runs).
				content := slices.Equal(r.Resources, []string{"apiexports/content"})
				for _, v := range r.Verbs {
					read := v == "get" || v == "list" || v == "watch" || v == "access"
					write := v == "patch" || v == "delete" || v == "create"
					if !read && (!write || !content) {
						t.Errorf("rule %+v grants %q; the webhook reads, and patches, deletes and creates only objects of the export", r, v)
					}
				}
			}
		})
	}
}

func TestEveryKustomizationBuilds(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(configDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "kustomization.yaml" {
			rel, _ := filepath.Rel(configDir, filepath.Dir(path))
			dirs = append(dirs, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 5 {
		t.Fatalf("found only %d kustomizations: %v", len(dirs), dirs)
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			if strings.HasPrefix(dir, "samples/compute-provider") && find(objs, "DependencyRule", "vm-dependencies") == nil {
				t.Errorf("the compute provider sample has no DependencyRule: %v", names(objs))
			}
		})
	}
}

// The samples' protected providers claim subjectaccessreviews, and their
// consumers accept the claim: the webhook asks kcp, through the claim,
// whether the user who sets skip-protection may delete the object, and
// without it skip-protection has no effect.
func TestSamplesClaimAccessReviews(t *testing.T) {
	const group, resource = "authorization.k8s.io", "subjectaccessreviews"
	for _, f := range []string{"network-provider/apiexport.yaml", "gateway-provider/apiexport.yaml"} {
		objs, err := kcpenv.ReadYAMLFile(filepath.Join(configDir, "samples", f))
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %d objects, %v", f, len(objs), err)
		}
		claimed := false
		for _, c := range convert[apisv1alpha2.APIExport](t, objs[0]).Spec.PermissionClaims {
			claimed = claimed || c.Group == group && c.Resource == resource && slices.Equal(c.Verbs, []string{"create"})
		}
		if !claimed {
			t.Errorf("%s does not claim create on %s", f, resource)
		}
	}
	for _, f := range []string{"consumer/apibindings.yaml", "gateway-consumer/apibindings.yaml"} {
		objs, err := kcpenv.ReadYAMLFile(filepath.Join(configDir, "samples", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			binding := convert[apisv1alpha2.APIBinding](t, o)
			if binding.Spec.Reference.Export == nil || binding.Spec.Reference.Export.Name == "compute.test.io" {
				continue
			}
			accepted := false
			for _, c := range binding.Spec.PermissionClaims {
				accepted = accepted || c.Group == group && c.Resource == resource && c.State == apisv1alpha2.ClaimAccepted && c.Selector.MatchAll
			}
			if !accepted {
				t.Errorf("%s: the binding %s does not accept the claim on %s", f, binding.Name, resource)
			}
		}
	}
}
