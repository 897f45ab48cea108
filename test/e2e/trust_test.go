//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// trustScenarios attack, with both binaries running as deployed, what the
// fast paths rest on: a tenant who may update but not delete, a copied
// clearance of an earlier release, exported YAML re-applied, and the
// labels that make allowed deletes cheap.
func trustScenarios() {
	It("trust: a tenant who may update VPCs but not delete them cannot have one deleted, with a record or a copied clearance", func(ctx context.Context) {
		updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.DeletionPolicy = depv1alpha1.DeletionPolicyReplay })
		DeferCleanup(func(ctx context.Context) {
			updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.DeletionPolicy = "" })
		})
		By("a tenant with get, list, create, update and patch on the bound types, and no delete")
		Expect(kcpenv.Apply(ctx, cli.Cluster(consumerA), toUnstructured(&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
			Rules: []rbacv1.PolicyRule{
				{NonResourceURLs: []string{"/"}, Verbs: []string{"access"}},
				{APIGroups: []string{"network.test.io", "compute.test.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			},
		}), toUnstructured(&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tenant"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "tenant"}},
		}))).To(Succeed())
		path := filepath.Join(artifacts, "tenant.kubeconfig")
		Expect(topo.WriteUserKubeconfig("tenant", consumerA.String(), path)).To(Succeed())
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		Expect(err).NotTo(HaveOccurred())
		tenant, err := client.New(cfg, client.Options{Scheme: kcpenv.NewScheme()})
		Expect(err).NotTo(HaveOccurred())

		create(ctx, consumerA, vpc("vpc-t1"), vpc("vpc-t2"), vpc("vpc-t3"), vm("vm-t3", "vpc-t3"))
		Expect(apierrors.IsForbidden(tenant.Delete(ctx, vpc("vpc-t1")))).To(BeTrue(), "the tenant must not be allowed to delete VPCs")
		for _, name := range []string{"vpc-t1", "vpc-t2"} {
			err := tenant.Patch(ctx, vpc(name), client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(
				`{"metadata":{"labels":{%q:"true"},"annotations":{%q:"{\"user\":\"admin\"}"}}}`, depv1alpha1.LabelDeletionRequested, depv1alpha1.AnnotationDeletionRequest))))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the tenant wrote a record on %s: %v", name, err)
			Expect(err.Error()).To(ContainSubstring("managed by the dependency webhook"))
		}
		By("copying a clearance of an earlier release onto a referenced VPC")
		Expect(tenant.Patch(ctx, vpc("vpc-t3"), client.RawPatch("application/merge-patch+json",
			[]byte(`{"metadata":{"labels":{"dependencies.opendefense.cloud/unreferenced":"0123456789abcdef"}}}`)))).To(Succeed())
		expectDenied(ctx, consumerA, vpcs, "vpc-t3", "VirtualMachine/default/vm-t3")
		Consistently(func() error {
			for _, name := range []string{"vpc-t1", "vpc-t2", "vpc-t3"} {
				if err := cli.Cluster(consumerA).Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vpc(name)); err != nil {
					return err
				}
			}
			return nil
		}).WithTimeout(10 * interval * 4).WithPolling(interval * 4).Should(Succeed())
	})

	It("trust: labels every VM with what it references, and re-applied exported YAML cannot change them", func(ctx context.Context) {
		Eventually(func(g Gomega) {
			rule := sampleRule()
			g.Expect(cli.Cluster(compute).Get(ctx, client.ObjectKeyFromObject(rule), rule)).To(Succeed())
			labelled := false
			for _, c := range rule.Status.Conditions {
				labelled = labelled || c.Type == depv1alpha1.ConditionDependentsLabelled && c.Status == metav1.ConditionTrue
			}
			g.Expect(labelled).To(BeTrue(), "the rule's dependents are not labelled: %v", rule.Status.Conditions)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		create(ctx, consumerA, vpc("vpc-lab"), vm("vm-lab", "vpc-lab"))
		key := reflabels.Key(vpcs.GroupResource(), "vpc-lab")
		got := vm("vm-lab", "")
		Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
		Expect(got.GetLabels()).To(HaveKey(key))
		Expect(got.GetLabels()).To(HaveKey(depv1alpha1.LabelReferencesScheme))

		By("re-applying the VM's exported YAML without the label, pointing at another VPC")
		exported := got.DeepCopy()
		labels := exported.GetLabels()
		delete(labels, key)
		exported.SetLabels(labels)
		Expect(unstructured.SetNestedField(exported.Object, "vpc-lab-2", "spec", "vpcRef", "name")).To(Succeed())
		Expect(cli.Cluster(consumerA).Update(ctx, exported)).To(Succeed())
		Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
		Expect(got.GetLabels()).To(HaveKey(reflabels.Key(vpcs.GroupResource(), "vpc-lab-2")))
		Expect(got.GetLabels()).NotTo(HaveKey(key))
		create(ctx, consumerA, vpc("vpc-lab-2"))
		expectDenied(ctx, consumerA, vpcs, "vpc-lab-2", "VirtualMachine/default/vm-lab")
		expectDeletable(ctx, consumerA, vpcs, "vpc-lab")
	})
}

// toUnstructured converts a typed object, with its TypeMeta set, for
// kcpenv.Apply.
func toUnstructured(obj runtime.Object) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	return &unstructured.Unstructured{Object: m}
}
