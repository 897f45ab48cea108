package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// sampleRule returns the design's example DependencyRule from
// config/samples, with a generated name.
func sampleRule() *unstructured.Unstructured {
	objs, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config", "samples", "compute-provider", "dependencyrule.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(objs).To(HaveLen(1))
	rule := objs[0]
	rule.SetName("")
	rule.SetGenerateName("rule-")
	return rule
}

// mutation changes an unstructured rule before it is created.
type mutation func(obj map[string]any)

// at walks obj along path, where numeric elements index into lists, and
// calls fn with the parent container and the last path element.
func at(obj map[string]any, path string, fn func(parent any, key string)) {
	elems := strings.Split(path, ".")
	var cur any = obj
	for _, e := range elems[:len(elems)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[e]
		case []any:
			i, err := strconv.Atoi(e)
			Expect(err).NotTo(HaveOccurred())
			cur = c[i]
		}
	}
	fn(cur, elems[len(elems)-1])
}

func set(path string, value any) mutation {
	return func(obj map[string]any) {
		at(obj, path, func(parent any, key string) {
			switch p := parent.(type) {
			case map[string]any:
				p[key] = value
			case []any:
				i, err := strconv.Atoi(key)
				Expect(err).NotTo(HaveOccurred())
				p[i] = value
			}
		})
	}
}

func del(path string) mutation {
	return func(obj map[string]any) {
		at(obj, path, func(parent any, key string) {
			delete(parent.(map[string]any), key)
		})
	}
}

// duplicateDependency appends a copy of spec.dependencies[0], changed by mutations.
func duplicateDependency(mutations ...mutation) mutation {
	return func(obj map[string]any) {
		deps := obj["spec"].(map[string]any)["dependencies"].([]any)
		dup := runtime.DeepCopyJSONValue(deps[0]).(map[string]any)
		for _, m := range mutations {
			m(dup)
		}
		obj["spec"].(map[string]any)["dependencies"] = append(deps, dup)
	}
}

func createRule(ctx context.Context, mutations ...mutation) (*unstructured.Unstructured, error) {
	rule := sampleRule()
	for _, m := range mutations {
		m(rule.Object)
	}
	err := cli.Cluster(providerPath).Create(ctx, rule)
	return rule, err
}

var _ = Describe("DependencyRule API", func() {
	It("is exported with a permission claim for validatingwebhookconfigurations", func(ctx context.Context) {
		export := &apisv1alpha2.APIExport{}
		Expect(cli.Cluster(depCtrlPath).Get(ctx, client.ObjectKey{Name: kcpenv.DepCtrlExportName}, export)).To(Succeed())

		Expect(export.Spec.Resources).To(ConsistOf(
			SatisfyAll(
				HaveField("Group", depv1alpha1.GroupVersion.Group),
				HaveField("Name", "dependencyrules"),
			),
		))
		Expect(export.Spec.PermissionClaims).To(ContainElement(SatisfyAll(
			HaveField("GroupResource", apisv1alpha2.GroupResource{
				Group:    admissionregistrationv1.GroupName,
				Resource: "validatingwebhookconfigurations",
			}),
			HaveField("Verbs", ContainElements("get", "list", "watch", "create", "update", "patch", "delete")),
		)))

		schema := &apisv1alpha1.APIResourceSchema{}
		Expect(cli.Cluster(depCtrlPath).Get(ctx, client.ObjectKey{Name: export.Spec.Resources[0].Schema}, schema)).To(Succeed())
		Expect(schema.Spec.Scope).To(BeEquivalentTo("Cluster"))
	})

	It("accepts the design's example unchanged and round-trips it", func(ctx context.Context) {
		created, err := createRule(ctx)
		Expect(err).NotTo(HaveOccurred())

		rule := &depv1alpha1.DependencyRule{}
		Expect(cli.Cluster(providerPath).Get(ctx, client.ObjectKeyFromObject(created), rule)).To(Succeed())
		Expect(rule.Spec).To(Equal(depv1alpha1.DependencyRuleSpec{
			Dependent: depv1alpha1.DependentResource{
				APIExportName: "compute.test.io",
				Group:         "compute.test.io",
				Version:       "v1",
				Kind:          "VirtualMachine",
				Resource:      "virtualmachines",
			},
			Dependencies: []depv1alpha1.Dependency{{
				APIExportRef: depv1alpha1.APIExportReference{Path: "root:network-provider", Name: "network.test.io"},
				Group:        "network.test.io",
				Version:      "v1",
				Resource:     "vpcs",
				FieldRef:     depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"},
			}},
		}))
	})

	It("accepts nested workspace paths, fan-out field paths and several references to one type", func(ctx context.Context) {
		_, err := createRule(ctx,
			set("spec.dependencies.0.apiExportRef.path", "root:org:team:network"),
			set("spec.dependencies.0.fieldRef.path", "spec.nics[*].vpcRef.name"),
			set("spec.dependencies.0.version", "v1alpha1"),
			duplicateDependency(set("fieldRef", map[string]any{"path": ".spec.backupVPCs[*]"})),
			duplicateDependency(set("resource", "subnets"), set("version", "v2beta3"), set("apiExportRef.path", "root")),
		)
		Expect(err).NotTo(HaveOccurred())
	})

	It("accepts the reference shapes of real APIs: namespaces, groups and kinds next to the name", func(ctx context.Context) {
		_, err := createRule(ctx,
			set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.parentRefs[*].name", "namespacePath": "namespace",
				"groupPath": "group", "kindPath": "kind", "kind": "Gateway"}),
			duplicateDependency(set("fieldRef", map[string]any{"path": ".spec.rules[*].backendRefs[*].name", "namespacePath": "ref.namespace",
				"groupPath": "group", "defaultGroup": "", "kindPath": "kind", "kind": "Backend", "defaultKind": "Service"})),
		)
		Expect(err).NotTo(HaveOccurred())
	})

	It("has a status subresource that spec writers cannot set", func(ctx context.Context) {
		created, err := createRule(ctx, set("status", map[string]any{"observedGeneration": int64(7)}))
		Expect(err).NotTo(HaveOccurred())

		rule := &depv1alpha1.DependencyRule{}
		Expect(cli.Cluster(providerPath).Get(ctx, client.ObjectKeyFromObject(created), rule)).To(Succeed())
		Expect(rule.Status.ObservedGeneration).To(BeZero(), "status must be ignored on create")

		rule.Status.ObservedGeneration = rule.Generation
		rule.Status.DependencyCount = 1
		rule.Status.Conditions = []metav1.Condition{{
			Type: depv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Installed",
			LastTransitionTime: metav1.Now(),
		}}
		Expect(cli.Cluster(providerPath).Status().Update(ctx, rule)).To(Succeed())

		Expect(cli.Cluster(providerPath).Get(ctx, client.ObjectKeyFromObject(created), rule)).To(Succeed())
		Expect(rule.Status.DependencyCount).To(BeEquivalentTo(1))
		Expect(rule.Status.Conditions).To(HaveLen(1))
	})

	It("prints the dependent kind, number of dependencies, Ready and Age", func(ctx context.Context) {
		export := &apisv1alpha2.APIExport{}
		Expect(cli.Cluster(depCtrlPath).Get(ctx, client.ObjectKey{Name: kcpenv.DepCtrlExportName}, export)).To(Succeed())
		schema := &apisv1alpha1.APIResourceSchema{}
		Expect(cli.Cluster(depCtrlPath).Get(ctx, client.ObjectKey{Name: export.Spec.Resources[0].Schema}, schema)).To(Succeed())

		var columns []string
		for _, c := range schema.Spec.Versions[0].AdditionalPrinterColumns {
			columns = append(columns, fmt.Sprintf("%s=%s", c.Name, c.JSONPath))
		}
		Expect(columns).To(Equal([]string{
			"Dependent=.spec.dependent.kind",
			"Dependencies=.status.dependencyCount",
			`Ready=.status.conditions[?(@.type=="Ready")].status`,
			"Age=.metadata.creationTimestamp",
		}))
	})

	DescribeTable("rejects an invalid rule with a message naming the field",
		func(ctx context.Context, m mutation, wantField, wantMessage string) {
			rule, err := createRule(ctx, m)
			Expect(err).To(HaveOccurred(), "rule was accepted: %s", mustJSON(rule.Object["spec"]))
			GinkgoWriter.Printf("kcp rejected the rule: %v\n", err)
			Expect(err.Error()).To(ContainSubstring(wantField), "error must name the field")
			Expect(err.Error()).To(ContainSubstring(wantMessage))
		},
		// required fields
		Entry("no dependent", del("spec.dependent"), "spec.dependent", "Required value"),
		Entry("no dependent.apiExportName", del("spec.dependent.apiExportName"), "spec.dependent.apiExportName", "Required value"),
		Entry("no dependent.kind", del("spec.dependent.kind"), "spec.dependent.kind", "Required value"),
		Entry("no dependent.resource", del("spec.dependent.resource"), "spec.dependent.resource", "Required value"),
		Entry("no dependencies", del("spec.dependencies"), "spec.dependencies", "Required value"),
		Entry("no apiExportRef", del("spec.dependencies.0.apiExportRef"), "spec.dependencies[0].apiExportRef", "Required value"),
		Entry("no apiExportRef.path", del("spec.dependencies.0.apiExportRef.path"), "spec.dependencies[0].apiExportRef.path", "Required value"),
		Entry("no fieldRef", del("spec.dependencies.0.fieldRef"), "spec.dependencies[0].fieldRef", "Required value"),
		Entry("no fieldRef.path", del("spec.dependencies.0.fieldRef.path"), "spec.dependencies[0].fieldRef.path", "Required value"),
		Entry("no dependency version", del("spec.dependencies.0.version"), "spec.dependencies[0].version", "Required value"),

		// at least one dependency
		Entry("empty dependencies", set("spec.dependencies", []any{}), "spec.dependencies", "should have at least 1 items"),

		// DNS-subdomain groups and export names
		Entry("dependent group with upper case and underscore", set("spec.dependent.group", "Compute_Test.io"), "spec.dependent.group", "should match"),
		Entry("dependency group starting with a dot", set("spec.dependencies.0.group", ".network.io"), "spec.dependencies[0].group", "should match"),
		Entry("empty dependency group", set("spec.dependencies.0.group", ""), "spec.dependencies[0].group", "should be at least 1 chars long"),
		Entry("dependent export name with a slash", set("spec.dependent.apiExportName", "compute/test"), "spec.dependent.apiExportName", "should match"),
		Entry("referenced export name with upper case", set("spec.dependencies.0.apiExportRef.name", "Network"), "spec.dependencies[0].apiExportRef.name", "should match"),

		// versions
		Entry("dependent version without v", set("spec.dependent.version", "1"), "spec.dependent.version", "must be a Kubernetes API version"),
		Entry("dependency version without number after alpha", set("spec.dependencies.0.version", "v1alpha"), "spec.dependencies[0].version", "must be a Kubernetes API version"),

		// plural lowercase resources, kinds
		Entry("dependent resource in camel case", set("spec.dependent.resource", "VirtualMachines"), "spec.dependent.resource", "should match"),
		Entry("dependency resource with a dot", set("spec.dependencies.0.resource", "vpcs.network"), "spec.dependencies[0].resource", "should match"),
		Entry("dependent kind in lower case", set("spec.dependent.kind", "virtualMachine"), "spec.dependent.kind", "should match"),

		// workspace paths
		Entry("workspace path without root", set("spec.dependencies.0.apiExportRef.path", "network-provider"), "spec.dependencies[0].apiExportRef.path", "must be a workspace path"),
		Entry("workspace path with trailing colon", set("spec.dependencies.0.apiExportRef.path", "root:"), "spec.dependencies[0].apiExportRef.path", "must be a workspace path"),
		Entry("workspace path with empty segment", set("spec.dependencies.0.apiExportRef.path", "root::network"), "spec.dependencies[0].apiExportRef.path", "must be a workspace path"),
		Entry("workspace path with upper case", set("spec.dependencies.0.apiExportRef.path", "root:Org:network"), "spec.dependencies[0].apiExportRef.path", "must be a workspace path"),

		// duplicates
		Entry("duplicate (group, resource, fieldRef.path)", duplicateDependency(), "spec.dependencies", "must not contain two entries with the same group, resource and fieldRef.path"),
		Entry("duplicate that differs only in version and export", duplicateDependency(set("version", "v2"), set("apiExportRef.name", "other")), "spec.dependencies", "must not contain two entries with the same group, resource and fieldRef.path"),

		// field paths
		Entry("field path with an empty segment", set("spec.dependencies.0.fieldRef.path", ".spec..name"), "spec.dependencies[0].fieldRef.path", "must be a field path"),
		Entry("field path with a list index", set("spec.dependencies.0.fieldRef.path", ".spec.nics[0].vpcRef.name"), "spec.dependencies[0].fieldRef.path", "must be a field path"),
		Entry("field path with a trailing dot", set("spec.dependencies.0.fieldRef.path", ".spec.vpcRef."), "spec.dependencies[0].fieldRef.path", "must be a field path"),
		Entry("field path starting with [*]", set("spec.dependencies.0.fieldRef.path", "[*].name"), "spec.dependencies[0].fieldRef.path", "must be a field path"),
		Entry("empty field path", set("spec.dependencies.0.fieldRef.path", ""), "spec.dependencies[0].fieldRef.path", "must be a field path"),
		Entry("a namespace path next to a list of names", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.names[*]", "namespacePath": "namespace"}),
			"spec.dependencies[0].fieldRef", "path must end with the field that holds the name"),
		Entry("a kind path without the kind", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.ref.name", "kindPath": "kind"}),
			"spec.dependencies[0].fieldRef", "kindPath and kind go together"),
		Entry("a kind without a kind path", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.ref.name", "kind": "Gateway"}),
			"spec.dependencies[0].fieldRef", "kindPath and kind go together"),
		Entry("a default kind without a kind path", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.ref.name", "defaultKind": "Gateway"}),
			"spec.dependencies[0].fieldRef", "defaultKind needs kindPath"),
		Entry("a default group without a group path", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.ref.name", "defaultGroup": "g.io"}),
			"spec.dependencies[0].fieldRef", "defaultGroup needs groupPath"),
		Entry("a namespace path with a wildcard", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.ref.name", "namespacePath": "ns[*]"}),
			"spec.dependencies[0].fieldRef.namespacePath", "should match"),
		Entry("an absolute namespace path", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.ref.name", "namespacePath": ".spec.ref.namespace"}),
			"spec.dependencies[0].fieldRef.namespacePath", "should match"),
		Entry("a kind in lower case", set("spec.dependencies.0.fieldRef", map[string]any{"path": ".spec.ref.name", "kindPath": "kind", "kind": "gateway"}),
			"spec.dependencies[0].fieldRef.kind", "should match"),
	)
})

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}
